// ProcessGroup with real /bin/sh children: output, stop bounds, orphans, restarts.
#include <catch2/catch.hpp>
#include <regex>

#include "epd/launcher/process_group.hpp"
#include "test_util.hpp"

using namespace epd::launcher;
using namespace epd::launcher::test;

namespace {

ChildSpec sh(std::string id, std::string script) {
  return {std::move(id), {"/bin/sh", "-c", std::move(script)}};
}

GroupOptions fast_options() {
  GroupOptions o;
  o.stop_grace = 300ms;
  o.kill_wait = 2000ms;
  o.restart.initial_backoff = 50ms;
  o.restart.max_backoff = 400ms;
  o.restart.max_restarts = 3;
  return o;
}

GroupOptions no_restart_options() {
  auto o = fast_options();
  o.restart.enabled = false;
  return o;
}

}  // namespace

TEST_CASE("lines of concurrent children are prefixed and never torn", "[launcher][multiproc]") {
  Captured cap;
  ProcessGroup group(no_restart_options(), cap.sink());
  // 2000 lines of ~200 bytes each from two children at once: far more than a pipe buffer, so reads
  // see arbitrary fragments.
  const std::string writer =
      "pad=$(printf '%0200d' 0); i=0; while [ $i -lt 2000 ]; do echo \"line $i $pad\"; i=$((i+1)); done";
  REQUIRE(group.start({sh("a", writer), sh("b", writer), sh("c", "printf 'no newline at the end'")}).ok());
  REQUIRE(wait_until([&] { return group.alive() == 0; }, 15s));
  group.stop();  // drains the pipes

  auto lines = cap.snapshot();
  std::string pad(200, '0');
  int next_a = 0, next_b = 0, c_seen = 0;
  for (const auto& l : lines) {
    if (l.starts_with("[launcher] ")) continue;
    if (l == "[c] no newline at the end") {
      ++c_seen;
      continue;
    }
    bool is_a = l.starts_with("[a] "), is_b = l.starts_with("[b] ");
    INFO(l.substr(0, 80));
    REQUIRE((is_a || is_b));
    int& next = is_a ? next_a : next_b;
    REQUIRE(l == "[" + std::string(is_a ? "a" : "b") + "] line " + std::to_string(next) + " " + pad);
    ++next;
  }
  CHECK(next_a == 2000);
  CHECK(next_b == 2000);
  CHECK(c_seen == 1);
  CHECK(cap.count_containing("[launcher] a (pid ") == 1);
  CHECK(cap.count_containing("exited with status 0; not restarting (restarts disabled)") == 3);
}

TEST_CASE("stop is bounded: SIGTERM, then SIGKILL for a child that ignores it", "[launcher][multiproc]") {
  Captured cap;
  ProcessGroup group(fast_options(), cap.sink());
  REQUIRE(
      group.start({sh("polite", "exec sleep 30"), sh("stubborn", "trap '' TERM; echo ready; exec sleep 30")})
          .ok());
  REQUIRE(cap.wait_for("[stubborn] ready"));
  pid_t polite = group.status("polite")->pid, stubborn = group.status("stubborn")->pid;
  REQUIRE(polite > 0);
  REQUIRE(stubborn > 0);

  auto t0 = Clock::now();
  group.stop();
  auto took = Clock::now() - t0;
  CHECK(took >= 300ms);  // the grace was given
  CHECK(took < 1500ms);  // and stop did not wait beyond grace + SIGKILL
  CHECK(process_gone(polite));
  CHECK(process_gone(stubborn));
  CHECK(cap.count_containing("polite (pid " + std::to_string(polite) + ") killed by signal 15 (SIGTERM)") ==
        1);
  CHECK(cap.count_containing("stubborn (pid " + std::to_string(stubborn) +
                             ") still running after 300 ms; sending SIGKILL") == 1);
  CHECK(cap.count_containing("stubborn (pid " + std::to_string(stubborn) +
                             ") killed by signal 9 (SIGKILL)") == 1);
  for (const auto& s : group.status()) {
    CHECK(s.state == ChildState::stopped);
    CHECK(s.pid == 0);
  }
  CHECK(group.alive() == 0);
  group.stop();  // idempotent
}

TEST_CASE("stop takes grandchildren too (the child's process group)", "[launcher][multiproc]") {
  Captured cap;
  ProcessGroup group(fast_options(), cap.sink());
  // One grandchild dies with SIGTERM, the other ignores it and needs the SIGKILL to the group.
  REQUIRE(
      group
          .start({sh("parent",
                     "sleep 30 & echo \"gc1 $!\"; (trap '' TERM; exec sleep 30) & echo \"gc2 $!\"; wait")})
          .ok());
  REQUIRE(cap.wait_for("[parent] gc2 "));
  auto text = cap.joined();
  pid_t gc1 = pid_after(text, "[parent] gc1 "), gc2 = pid_after(text, "[parent] gc2 ");
  REQUIRE(gc1 > 0);
  REQUIRE(gc2 > 0);
  REQUIRE_FALSE(process_gone(gc2));
  group.stop();
  CHECK(wait_gone(gc1, 1000ms));
  CHECK(wait_gone(gc2, 1000ms));
}

TEST_CASE("a crashed child's leftover grandchildren are killed before it restarts", "[launcher][multiproc]") {
  Captured cap;
  ProcessGroup group(fast_options(), cap.sink());
  REQUIRE(group.start({sh("crashy", "sleep 30 & echo \"gc $!\"; sleep 0.2; exit 1")}).ok());
  REQUIRE(cap.wait_for("[crashy] gc "));
  pid_t gc = pid_after(cap.joined(), "[crashy] gc ");
  REQUIRE(cap.wait_for("crashy (pid "));
  CHECK(wait_gone(gc, 1000ms));
  group.stop();
}

TEST_CASE("a crashing child is restarted with backoff, counted, then given up", "[launcher][multiproc]") {
  Captured cap;
  ProcessGroup group(fast_options(), cap.sink());
  REQUIRE(group.start({sh("flaky", "echo up; exit 3"), sh("steady", "exec sleep 30")}).ok());
  REQUIRE(cap.wait_for("giving up", 5s));

  auto st = group.status("flaky");
  REQUIRE(st);
  CHECK(st->state == ChildState::gave_up);
  CHECK(st->restarts == 3);
  CHECK(st->pid == 0);
  CHECK(st->last_exit == "exited with status 3");
  CHECK(cap.count_containing("[flaky] up") == 4);
  CHECK(cap.count_containing("exited with status 3; restarting in 50 ms (restart 1/3)") == 1);
  CHECK(cap.count_containing("exited with status 3; restarting in 100 ms (restart 2/3)") == 1);
  CHECK(cap.count_containing("exited with status 3; restarting in 200 ms (restart 3/3)") == 1);
  CHECK(cap.count_containing("exited with status 3; giving up: 3 restarts within 60 s") == 1);

  // The starts are spaced by at least the backoff.
  std::vector<Clock::time_point> ups;
  {
    std::lock_guard lock(cap.mu);
    for (size_t i = 0; i < cap.lines.size(); ++i)
      if (cap.lines[i] == "[flaky] up") ups.push_back(cap.times[i]);
  }
  REQUIRE(ups.size() == 4);
  CHECK(ups[1] - ups[0] >= 50ms);
  CHECK(ups[2] - ups[1] >= 100ms);
  CHECK(ups[3] - ups[2] >= 200ms);

  // The other child is untouched, and the group is still alive through it.
  CHECK(group.status("steady")->state == ChildState::running);
  CHECK(group.status("steady")->restarts == 0);
  CHECK(group.alive() == 1);
  group.stop();
}

TEST_CASE("a child killed by a signal is restarted with a new pid", "[launcher][multiproc]") {
  Captured cap;
  ProcessGroup group(fast_options(), cap.sink());
  REQUIRE(group.start({sh("victim", "echo started; exec sleep 30")}).ok());
  REQUIRE(cap.wait_for("[victim] started"));
  pid_t first = group.status("victim")->pid;
  REQUIRE(::kill(first, SIGKILL) == 0);
  REQUIRE(cap.wait_for("[victim] started", 3s, 2));
  auto st = group.status("victim");
  CHECK(st->state == ChildState::running);
  CHECK(st->restarts == 1);
  CHECK(st->pid != first);
  CHECK(st->last_exit == "killed by signal 9 (SIGKILL)");
  CHECK(cap.count_containing("[launcher] victim (pid " + std::to_string(first) +
                             ") killed by signal 9 (SIGKILL); restarting in 50 ms (restart 1/3)") == 1);
  CHECK(cap.count_containing("[launcher] restarted victim (pid " + std::to_string(st->pid) +
                             ", restart 1)") == 1);
  pid_t second = st->pid;
  group.stop();
  CHECK(process_gone(second));
}

TEST_CASE("a child that cannot be executed fails start and stops the others", "[launcher][multiproc]") {
  Captured cap;
  ProcessGroup group(fast_options(), cap.sink());
  auto st = group.start({sh("good", "echo up; exec sleep 30"), {"bad", {"/nonexistent/epd-nothing"}}});
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().detail.find("bad: cannot execute /nonexistent/epd-nothing: No such file") !=
        std::string::npos);
  pid_t good = pid_after(cap.joined(), "[launcher] started good (pid ");
  REQUIRE(good > 0);
  CHECK(process_gone(good));
  CHECK(group.alive() == 0);
}

TEST_CASE("bad child lists are rejected before anything starts", "[launcher][multiproc]") {
  Captured cap;
  ProcessGroup group(fast_options(), cap.sink());
  CHECK_FALSE(group.start({sh("x", "true"), sh("x", "true")}).ok());
  ProcessGroup group2(fast_options(), cap.sink());
  CHECK_FALSE(group2.start({sh("", "true")}).ok());
  CHECK(cap.snapshot().empty());
}

TEST_CASE("stdout sink survives a reader that went away (no SIGPIPE death)", "[launcher][multiproc]") {
  signal(SIGPIPE, SIG_DFL);  // make sure a SIGPIPE would really kill this test process
  int p[2];
  REQUIRE(pipe(p) == 0);
  {
    FdSink sink(p[1]);
    sink.write_line("first");
    char buf[16];
    REQUIRE(wait_until([&] { return ::read(p[0], buf, sizeof buf) > 0; }, 2s));
    close(p[0]);
    for (int i = 0; i < 1000; ++i) sink.write_line("after the reader left " + std::to_string(i));
    CHECK(wait_until([&] { return sink.broken(); }, 2s));
  }
  close(p[1]);
}

TEST_CASE("stdout sink drops lines instead of blocking on a stuck reader", "[launcher][multiproc]") {
  int p[2];
  REQUIRE(pipe(p) == 0);
  Clock::time_point t0;
  {
    FdSink sink(p[1], 64 * 1024);
    std::string line(1000, 'x');
    for (int i = 0; i < 2000; ++i) sink.write_line(line);  // 2 MB into a 64 KiB pipe nobody reads
    CHECK(sink.dropped_lines() > 0);
    std::this_thread::sleep_for(100ms);  // the pipe is full now; these stay queued
    for (int i = 0; i < 10; ++i) sink.write_line(line);
    t0 = Clock::now();
  }  // the destructor gives up after its bounded flush
  auto took = Clock::now() - t0;
  CHECK(took >= 900ms);
  CHECK(took < 2s);
  close(p[0]);
  close(p[1]);
}

TEST_CASE("restart on request: SIGTERM lets the child finish, it starts again at once, not as a crash",
          "[launcher][multiproc]") {
  Captured cap;
  ProcessGroup group(no_restart_options(), cap.sink());  // requested restarts happen even so
  // A child that "drains": on SIGTERM it says so and exits 0.
  REQUIRE(group
              .start({sh("worker", "trap 'echo drained; exit 0' TERM; echo up; while :; do sleep 0.05; done"),
                      sh("other", "exec sleep 30")})
              .ok());
  REQUIRE(cap.wait_for("[worker] up"));
  const pid_t first = group.status("worker")->pid;
  const pid_t other = group.status("other")->pid;
  auto pid = group.restart("worker", 5s);
  REQUIRE(pid.ok());
  CHECK(*pid != first);
  REQUIRE(cap.wait_for("[worker] up", 3s, 2));
  CHECK(cap.count_containing("[worker] drained") == 1);
  const auto st = group.status("worker");
  CHECK(st->state == ChildState::running);
  CHECK(st->pid == *pid);
  CHECK(st->restarts == 0);  // not a crash: the restart policy's count is untouched
  CHECK(st->last_exit == "exited with status 0");
  CHECK(cap.count_containing("[launcher] worker (pid " + std::to_string(first) +
                             ") exited with status 0; starting it again (restart requested)") == 1);
  CHECK(cap.count_containing("[launcher] started worker again (pid " + std::to_string(*pid) +
                             ", on request)") == 1);
  CHECK(group.status("other")->pid == other);  // nobody else was touched
  CHECK(process_gone(first));

  // Unknown ids and a child that is not running are refused with the reason.
  auto unknown = group.restart("nobody", 1s);
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().detail == "no child 'nobody'");
  group.stop();
  auto stopped = group.restart("worker", 1s);
  REQUIRE_FALSE(stopped.ok());
  CHECK(stopped.error().detail == "the group is stopping");
}

TEST_CASE("restart on request of a child that ignores SIGTERM: SIGKILL after the grace, then started again",
          "[launcher][multiproc]") {
  Captured cap;
  ProcessGroup group(fast_options(), cap.sink());
  REQUIRE(group.start({sh("stubborn", "trap '' TERM; echo up; while :; do sleep 0.05; done")}).ok());
  REQUIRE(cap.wait_for("[stubborn] up"));
  const pid_t first = group.status("stubborn")->pid;
  const auto begin = Clock::now();
  auto pid = group.restart("stubborn", 5s);
  REQUIRE(pid.ok());
  CHECK(Clock::now() - begin >= 300ms);  // the grace was given
  CHECK(cap.count_containing("[launcher] stubborn (pid " + std::to_string(first) +
                             ") still running after 300 ms; sending SIGKILL") == 1);
  CHECK(group.status("stubborn")->last_exit == "killed by signal 9 (SIGKILL)");
  REQUIRE(cap.wait_for("[stubborn] up", 3s, 2));
  group.stop();
  CHECK(process_gone(*pid));
}
