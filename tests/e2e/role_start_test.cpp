// A role process given a bad setting stops at start, non-zero, with a message that names the setting.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <chrono>

#include "../launcher/test_util.hpp"
#include "cluster.hpp"

using namespace epd;
using namespace epd::testing;

TEST_CASE("a role refuses compute threads out of range, naming the setting", "[e2e][multiproc]") {
  using namespace std::chrono_literals;
  for (const char* role : {"prefill", "decode"}) {
    ClusterSpec spec;
    spec.defaults[role] = "threads = 0\n";
    Cluster cluster(spec);  // only writes the config; nothing is started
    launcher::test::Proc proc({std::string(EPD_BIN_DIR) + "/epd-" + role, "--config",
                               cluster.config_file().string(), "--id", std::string(role) + "-0"});
    auto status = proc.wait(10s);
    REQUIRE(status);
    proc.read_all(1s);
    INFO(proc.output());
    CHECK(WIFEXITED(*status));
    CHECK(WEXITSTATUS(*status) != 0);
    CHECK(proc.output().find("key 'threads' must be in [1, 256], got 0") != std::string::npos);
  }
}
