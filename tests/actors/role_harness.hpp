#pragma once
// Deterministic in-process harness for the actors: CAF's test coordinator plus offline bridges.
//
// Why the coordinator is driven directly from Catch2 and not through caf/test/dsl.hpp: the DSL's fixture and
// its expect/inject macros are built on CAF's own unit-test engine (caf::test::engine for argv, CAF_CHECK,
// CAF_FAIL), which cannot share a binary with Catch2's main. The coordinator itself is plain CAF: with
// scheduler.policy = testing every scheduled actor runs on the test's thread, one message at a time, when
// the test calls run(), and delayed messages fire only when the test advances the coordinator's clock
// (advance_time), so no test sleeps or depends on timing. Detached actors still get their own thread: roles
// spawned with RoleContext::detached_workers = false run their compute and transfer actors scheduled too.
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <catch2/catch.hpp>

#include <chrono>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "epd/protocol/compat.hpp"

#include "epd/actors/bridge.hpp"
#include "epd/protocol/codec.hpp"

namespace epd::test {

// The incarnation each peer role has in the role tests.
inline constexpr uint64_t kRouterInc = 11, kPrefillInc = 22, kDecodeInc = 33, kEncoderInc = 44;

// An actor that takes envelopes and does nothing. The unused argument is there because CAF 0.17 dereferences
// a null argument tuple when a function actor takes none (UBSan reports it).
inline caf::behavior envelope_sink(int) {
  return {[](protocol::Envelope&) {}};
}

using namespace std::chrono_literals;

class Harness {
 public:
  Harness()
      : sys_(configure(cfg_)), sched_(dynamic_cast<caf::scheduler::test_coordinator&>(sys_.scheduler())) {
    // As CAF's own fixture does: no time point the actors see is the clock's epoch.
    sched_.clock().current_time += std::chrono::hours(1);
  }
  Harness(const Harness&) = delete;
  Harness& operator=(const Harness&) = delete;
  ~Harness() { shutdown(); }

  caf::actor_system& system() { return sys_; }
  caf::scheduler::test_coordinator& sched() { return sched_; }
  caf::actor_clock::time_point now() const { return sched_.clock().current_time; }

  // Runs every queued message (not the delayed ones); returns how many.
  size_t run() { return sched_.run(); }
  // Moves the clock by `d` in steps of at most `step`, firing what falls due and running after each step,
  // so periodic timers (which re-arm when they fire) fire once per step.
  void advance(std::chrono::milliseconds d, std::chrono::milliseconds step = 1ms) {
    run();
    for (auto left = d; left.count() > 0;) {
      const auto s = std::min(step, left);
      sched_.advance_time(s);
      run();
      left -= s;
    }
  }

  // An actor stopped when the test ends (its bridge subscriptions are dropped by stop_bridges).
  caf::actor keep(caf::actor a) {
    actors_.push_back(a);
    return a;
  }
  actors::BridgePtr offline_bridge(const std::string& id, uint64_t incarnation) {
    bridges_.push_back(actors::Bridge::start_offline(id, incarnation));
    return bridges_.back();
  }

  // Stops every kept actor and runs their last messages; the bridges drop their routes (which would keep
  // the actors alive in a cycle: bridge -> actor -> role context -> bridge).
  void shutdown() {
    for (auto& b : bridges_) b->stop();
    for (auto& a : actors_) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    actors_.clear();
    run();
  }

 private:
  static caf::actor_system_config& configure(caf::actor_system_config& cfg) {
    cfg.set("scheduler.policy", caf::atom("testing"));
    cfg.set("logger.file-verbosity", caf::atom("quiet"));
    cfg.set("logger.console", caf::atom("none"));
    return cfg;
  }

  caf::actor_system_config cfg_;
  caf::actor_system sys_;
  caf::scheduler::test_coordinator& sched_;
  std::vector<caf::actor> actors_;
  std::vector<actors::BridgePtr> bridges_;
};

// Every log line (debug and up) while it lives, for tests of what an operator would grep for.
class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()) {
    auto logger =
        std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(out_));
    logger->set_level(spdlog::level::debug);
    spdlog::set_default_logger(std::move(logger));
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  ~LogCapture() { spdlog::set_default_logger(previous_); }

  // The captured lines that contain `needle`.
  std::vector<std::string> lines_with(const std::string& needle) const {
    std::vector<std::string> found;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);)
      if (line.find(needle) != std::string::npos) found.push_back(line);
    return found;
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

// One frame an offline bridge sent, decoded.
struct Sent {
  bool reply = false;
  std::string to;
  protocol::Envelope env;

  template <class Msg>
  const Msg* as() const {
    return std::get_if<Msg>(&env.body);
  }
};

// Everything `bridge` sent since the last call, decoded (a frame that does not decode fails the test).
inline std::vector<Sent> sent(actors::Bridge& bridge) {
  std::vector<Sent> out;
  for (auto& f : bridge.outbox()->take()) {
    auto env = protocol::decode(f.frame, {});
    REQUIRE(env.ok());
    out.push_back(Sent{f.reply, f.to, std::move(*env)});
  }
  return out;
}

// The frames of type Msg in `frames`.
template <class Msg>
std::vector<const Sent*> of_type(const std::vector<Sent>& frames) {
  std::vector<const Sent*> out;
  for (const auto& f : frames)
    if (f.template as<Msg>()) out.push_back(&f);
  return out;
}

// A copy of the one frame of type Msg in `frames` (fails the test unless there is exactly one). A copy, so it
// outlives `frames` when the test reuses that vector for the next step.
template <class Msg>
Msg only(const std::vector<Sent>& frames, std::string* to = nullptr) {
  auto found = of_type<Msg>(frames);
  INFO("frames of type " << protocol::type_name(Msg::kType) << ": " << found.size() << " of "
                         << frames.size());
  REQUIRE(found.size() == 1);
  if (to) *to = found.front()->to;
  return *found.front()->template as<Msg>();
}

// Hands `bridge` a frame from `sender` as its I/O thread would (through our ROUTER, routing id = sender):
// decoded, checked and routed to the subscribed actor, or answered by the bridge.
inline void deliver(actors::Bridge& bridge, const std::string& sender, uint64_t incarnation,
                    protocol::Body body) {
  bridge.receive_frame(sender, true,
                       protocol::encode(protocol::Envelope{sender, incarnation, std::move(body)}));
}

inline protocol::PeerInfo peer(const std::string& id, const std::string& role, uint64_t incarnation) {
  protocol::PeerInfo p;
  p.instance_id = id;
  p.role = role;
  p.control_endpoint = "offline://" + id;
  p.incarnation = incarnation;
  p.identity = protocol::current_protocol_identity();
  return p;
}

// A membership publisher's BurstWindow (shortest 50 ms, longest 400 ms), seen by one member: `change(i)`
// makes change i, `deltas()` counts the deltas the member got since last asked. 200 changes 10 ms apart go in
// windows of 50, 100, 200 and then 400 ms, not forty of 50 ms; after a quiet second a lone change goes at
// once, and the next waits the shortest window again.
template <class Change, class Deltas>
void check_burst_window(Harness& h, Change change, Deltas deltas) {
  using namespace std::chrono_literals;
  for (int i = 0; i < 200; ++i) {
    change(i);
    h.advance(10ms, 10ms);
  }
  h.advance(400ms, 10ms);
  const size_t burst = deltas();
  CHECK(burst >= 6);
  CHECK(burst <= 9);
  h.advance(1000ms, 100ms);
  change(200);
  CHECK(deltas() == 1);
  h.advance(10ms, 10ms);
  change(201);
  h.advance(30ms, 10ms);
  CHECK(deltas() == 0);
  h.advance(20ms, 10ms);
  CHECK(deltas() == 1);
}

}  // namespace epd::test
