// A role process given a bad setting stops at start, non-zero, with a message that names the setting.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <chrono>

#include "../launcher/test_util.hpp"
#include "cluster.hpp"

using namespace epd;
using namespace epd::testing;

namespace {

// Starts instance `role`-0 (the router: "router") of a cluster whose [defaults.<role>] holds `settings`,
// alone; it must exit non-zero within 10 s and say `message`.
void check_refused(const std::string& role, const std::string& settings, const std::string& message) {
  const std::string id = role == "router" ? role : role + "-0";
  using namespace std::chrono_literals;
  ClusterSpec spec;
  spec.defaults[role] = settings;
  Cluster cluster(spec);  // only writes the config; nothing is started
  launcher::test::Proc proc(
      {std::string(EPD_BIN_DIR) + "/epd-" + role, "--config", cluster.config_file().string(), "--id", id});
  auto status = proc.wait(10s);
  REQUIRE(status);
  proc.read_all(1s);
  INFO(role << ": " << proc.output());
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) != 0);
  CHECK(proc.output().find(message) != std::string::npos);
}

}  // namespace

TEST_CASE("a role refuses compute threads out of range, naming the setting", "[e2e][multiproc]") {
  for (const char* role : {"prefill", "decode"})
    check_refused(role, "threads = 0\n", "key 'threads' must be in [1, 256], got 0");
  // The router computes nothing: a `threads` there would do nothing, so it is a mistake.
  check_refused("router", "threads = 2\n", "threads' is not known here");
}

TEST_CASE("prefix cache: a budget larger than the pool stops prefill at start, naming both settings",
          "[e2e][multiproc]") {
  check_refused("prefill", "kv_pages = 64\nprefix_cache_pages = 65\n",
                "prefix_cache_pages (65) is more than kv_pages (64)");
}
