// A launcher that dies without cleaning up (kill -9) still takes its children with it: PR_SET_PDEATHSIG.
#include <catch2/catch.hpp>

#include "test_util.hpp"

using namespace epd::launcher::test;

TEST_CASE("children die with a launcher that is killed -9", "[launcher][multiproc]") {
  Proc probe({EPD_LAUNCHER_PROBE, "exec sleep 30", "echo child-up; exec sleep 30"});
  REQUIRE(probe.read_until("probe: all started", 5s));
  REQUIRE(probe.read_until("[c1] child-up", 5s));
  pid_t c0 = pid_after(probe.output(), "[launcher] started c0 (pid ");
  pid_t c1 = pid_after(probe.output(), "[launcher] started c1 (pid ");
  REQUIRE(c0 > 0);
  REQUIRE(c1 > 0);
  REQUIRE_FALSE(process_gone(c0));

  REQUIRE(::kill(probe.pid(), SIGKILL) == 0);
  auto st = probe.wait(5s);
  REQUIRE(st);
  CHECK(WIFSIGNALED(*st));
  CHECK(wait_gone(c0, 3s));
  CHECK(wait_gone(c1, 3s));
}
