// The bridge over real ZeroMQ sockets on 127.0.0.1: typed delivery, and bad frames rejected with an ERROR
// reply while the bridge keeps serving.
#include <atomic>
#include <caf/all.hpp>
#include <catch2/catch.hpp>
#include <mutex>
#include <thread>
#include <zmq.hpp>

#include "epd/actors/bridge.hpp"
#include "role_harness.hpp"

using namespace epd;
using namespace epd::actors;
using protocol::ErrorCode;

namespace {

std::optional<protocol::Envelope> next_envelope(caf::scoped_actor& self) {
  std::optional<protocol::Envelope> out;
  self->receive([&](protocol::Envelope& e) { out = std::move(e); },
                caf::after(std::chrono::seconds(5)) >> [] {});
  return out;
}

// A raw DEALER with its own routing id, as an attacker or a buggy peer would use.
struct RawPeer {
  zmq::context_t ctx;
  zmq::socket_t s{ctx, zmq::socket_type::dealer};
  RawPeer(const std::string& id, const std::string& endpoint) {
    s.set(zmq::sockopt::routing_id, id);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::rcvtimeo, 5000);
    s.connect(endpoint);
  }
  void send(const std::vector<uint8_t>& frame) { s.send(zmq::buffer(frame), zmq::send_flags::none); }
  std::optional<protocol::ErrorReply> error_reply() {
    zmq::message_t m;
    if (!s.recv(m)) return std::nullopt;
    auto env = protocol::decode({static_cast<const uint8_t*>(m.data()), m.size()});
    if (!env || !std::holds_alternative<protocol::ErrorReply>(env->body)) return std::nullopt;
    return std::get<protocol::ErrorReply>(env->body);
  }
};

// Two bridges on 127.0.0.1, alice (incarnation 11) and bob (22), and a scoped actor to receive with.
struct AliceAndBob {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  protocol::Result<std::shared_ptr<Bridge>> a = Bridge::start("alice", 11, "tcp://127.0.0.1:*");
  protocol::Result<std::shared_ptr<Bridge>> b = Bridge::start("bob", 22, "tcp://127.0.0.1:*");
};

// The types these tests send; anything else is answered by the bridge itself.
void subscribe_test_types(Bridge& bridge, const caf::actor& target) {
  for (auto t : {protocol::MessageType::heartbeat, protocol::MessageType::error})
    REQUIRE(bridge.subscribe(t, target).ok());
}

}  // namespace

TEST_CASE("bridge delivers typed messages and rejects bad frames without stopping", "[actors][bridge]") {
  AliceAndBob f;
  auto &a = f.a, &b = f.b;
  auto& self = f.self;
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  subscribe_test_types(*b.value(), caf::actor_cast<caf::actor>(self));

  a.value()->send_to_endpoint(b.value()->endpoint(), protocol::Heartbeat{.seq = 7});
  auto env = next_envelope(self);
  REQUIRE(env);
  CHECK(env->sender == "alice");
  CHECK(env->incarnation == 11);
  REQUIRE(std::holds_alternative<protocol::Heartbeat>(env->body));
  CHECK(std::get<protocol::Heartbeat>(env->body).seq == 7);

  RawPeer raw("mallory", b.value()->endpoint());
  SECTION("garbage bytes") {
    raw.send({'h', 'e', 'l', 'l', 'o'});
    auto err = raw.error_reply();
    REQUIRE(err);
    CHECK(err->code == ErrorCode::bad_magic);
  }
  SECTION("unknown message type") {
    auto frame = protocol::encode({"mallory", 1, protocol::Heartbeat{}});
    frame[6] = 0x12;
    frame[7] = 0x34;
    raw.send(frame);
    auto err = raw.error_reply();
    REQUIRE(err);
    CHECK(err->code == ErrorCode::unknown_type);
  }
  SECTION("a sender id that is not the routing id") {
    raw.send(protocol::encode({"alice", 11, protocol::Heartbeat{}}));
    auto err = raw.error_reply();
    REQUIRE(err);
    CHECK(err->code == ErrorCode::invalid_request);
  }
  SECTION("a body missing a required field") {
    auto frame = protocol::encode({"mallory", 1, protocol::Heartbeat{}});
    frame.resize(frame.size() - 1);  // cut the body short
    raw.send(frame);
    auto err = raw.error_reply();
    REQUIRE(err);
    CHECK((err->code == ErrorCode::malformed_body || err->code == ErrorCode::missing_field));
  }
  CHECK(b.value()->stats().rejected == 1);
  // Still serving.
  a.value()->send_to_endpoint(b.value()->endpoint(), protocol::Heartbeat{.seq = 8});
  auto again = next_envelope(self);
  REQUIRE(again);
  CHECK(std::get<protocol::Heartbeat>(again->body).seq == 8);
  a.value()->stop();
  b.value()->stop();
}

TEST_CASE("bridge drops frames queued on a connection that a newer one took over, unanswered",
          "[actors][bridge]") {
  // ROUTER_HANDOVER gives the old connection one of libzmq's own ids (a zero byte and four more) until it
  // closes: its queued frames come under that id, though their sender is the peer's.
  test::Harness h;
  auto bridge = h.offline_bridge("bob", 22);
  bridge->receive_frame(std::string("\0\x80\x00\x00\x01", 5), true,
                        protocol::encode({"alice", 11, protocol::Heartbeat{}}));
  h.run();
  CHECK(test::sent(*bridge).empty());
  CHECK(bridge->stats().rejected == 1);
  CHECK(bridge->stats().delivered == 0);
  // Any other routing id that is not its sender's is answered with an ERROR, as before.
  bridge->receive_frame("mallory", true, protocol::encode({"alice", 11, protocol::Heartbeat{}}));
  h.run();
  auto out = test::sent(*bridge);
  REQUIRE(out.size() == 1);
  REQUIRE(out[0].as<protocol::ErrorReply>());
  CHECK(out[0].as<protocol::ErrorReply>()->code == ErrorCode::invalid_request);
  CHECK(bridge->stats().rejected == 2);
}

namespace {

// The next PeerEvent (envelopes in between are skipped), or nothing within `wait`.
std::optional<PeerEvent> next_peer_event(caf::scoped_actor& self,
                                         std::chrono::milliseconds wait = std::chrono::seconds(5)) {
  std::optional<PeerEvent> out;
  bool timed_out = false;
  while (!out && !timed_out)
    self->receive([&](PeerEvent& e) { out = std::move(e); }, [&](protocol::Envelope&) {},
                  caf::after(wait) >> [&] { timed_out = true; });
  return out;
}

}  // namespace

TEST_CASE("bridge reports a peer whose connection breaks, and a newer incarnation", "[actors][bridge]") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto a =
      Bridge::start("alice", 11, "tcp://127.0.0.1:*", {}, LivenessConfig{std::chrono::milliseconds(100), 3});
  auto b = Bridge::start("bob", 22, "tcp://127.0.0.1:*");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  a.value()->subscribe_liveness(caf::actor_cast<caf::actor>(self));
  subscribe_test_types(*a.value(), caf::actor_cast<caf::actor>(self));
  protocol::PeerInfo bob;
  bob.instance_id = "bob";
  bob.role = "x";
  bob.control_endpoint = b.value()->endpoint();
  bob.incarnation = 22;
  a.value()->peers().upsert(bob);
  // A frame from a newer incarnation of bob than the listed one: reported once.
  subscribe_test_types(*b.value(), caf::actor_cast<caf::actor>(self));
  auto bob2 = Bridge::start("bob", 23, "tcp://127.0.0.1:*");
  REQUIRE(bob2.ok());
  bob2.value()->send_to_endpoint(a.value()->endpoint(), protocol::Heartbeat{.seq = 1});
  bob2.value()->send_to_endpoint(a.value()->endpoint(), protocol::Heartbeat{.seq = 2});
  auto ev = next_peer_event(self);
  REQUIRE(ev);
  CHECK(ev->id == "bob");
  CHECK(ev->old_incarnation == 22);
  CHECK(ev->new_incarnation == 23);
  CHECK_FALSE(next_peer_event(self, std::chrono::milliseconds(300)));  // once, not per frame
  // alice's connection to bob breaks when bob stops: reported with bob's listed incarnation.
  a.value()->send(std::string("bob"), protocol::Heartbeat{.seq = 3});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // connected (bob's frame reaches self)
  const auto t0 = std::chrono::steady_clock::now();
  b.value()->stop();
  ev = next_peer_event(self);
  REQUIRE(ev);
  CHECK(ev->id == "bob");
  CHECK(ev->old_incarnation == 22);
  CHECK(ev->new_incarnation == 0);
  CHECK(ev->endpoint == b.value()->endpoint());
  INFO("reported after "
       << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count()
       << " ms");
  CHECK(a.value()->peers().mark_dead("bob", 22));
  CHECK_FALSE(a.value()->peers().alive("bob"));
  CHECK_FALSE(a.value()->peers().mark_dead("bob", 22));  // once
  bob2.value()->stop();
  a.value()->stop();
}

namespace {

// What the inline-delivery test's actors saw: each frame's seq and the thread that handled it.
struct Seen {
  std::mutex mu;
  std::vector<std::pair<uint64_t, std::thread::id>> frames, forwarded;
  size_t count() {
    std::lock_guard lock(mu);
    return frames.size() + forwarded.size();
  }
};

using forward_atom = caf::atom_constant<caf::atom("forward")>;
using busy_atom = caf::atom_constant<caf::atom("busy")>;

// The busy actor's hand-shake with the test: it says when it is busy, and stays busy until released.
struct Gate {
  std::atomic<bool> busy{false}, release{false};
};

// True once `actor` has parked with an empty mailbox: the next message wakes it through its enqueuer's unit.
bool parked(const caf::actor& actor) {
  auto* sa = dynamic_cast<caf::scheduled_actor*>(caf::actor_cast<caf::abstract_actor*>(actor));
  return sa != nullptr && sa->mailbox().blocked();
}

template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

}  // namespace

// A frame for an idle actor runs on the channel thread (no worker is woken for it); a message that actor
// sends is scheduled as usual, not run on the channel thread too; a busy actor's frames wait in its mailbox
// (it is busy on the worker) and all arrive in order. Each phase waits for the state it tests (parked, or
// held busy until its frames are delivered), so no outcome depends on how the threads happen to interleave.
TEST_CASE("bridge runs an idle actor's frame on the channel thread, and only that one", "[actors][bridge]") {
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 1);  // one worker, so "not the worker" is checkable
  cfg.set("scheduler.policy", caf::atom("sharing"));
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  Seen seen;
  Gate gate;
  // Each actor gets its state as an argument (CAF's spawn of an argument-less function trips UBSan).
  std::thread::id worker;
  auto probe = sys.spawn(
      [](caf::event_based_actor*, std::thread::id* out) -> caf::behavior {
        return {[out](int) { *out = std::this_thread::get_id(); }};
      },
      &worker);
  self->request(probe, caf::infinite, 1).receive([] {}, [](caf::error&) {});  // `worker` is set after this

  auto echo = sys.spawn(
      [](caf::event_based_actor*, Seen* seen) -> caf::behavior {
        return {[seen](forward_atom, uint64_t seq) {
          std::lock_guard lock(seen->mu);
          seen->forwarded.emplace_back(seq, std::this_thread::get_id());
        }};
      },
      &seen);
  auto target = sys.spawn(
      [](caf::event_based_actor* me, Seen* seen, caf::actor echo, Gate* gate) -> caf::behavior {
        return {[me, seen, echo](protocol::Envelope& env) {
                  const uint64_t seq = std::get<protocol::Heartbeat>(env.body).seq;
                  {
                    std::lock_guard lock(seen->mu);
                    seen->frames.emplace_back(seq, std::this_thread::get_id());
                  }
                  me->send(echo, forward_atom::value, seq);
                },
                [gate](busy_atom) {
                  gate->busy = true;
                  eventually([gate] { return gate->release.load(); });
                }};
      },
      &seen, echo, &gate);
  auto a = Bridge::start("alice", 1, "tcp://127.0.0.1:*");
  auto b = Bridge::start("bob", 1, "tcp://127.0.0.1:*");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(b.value()->subscribe(protocol::MessageType::heartbeat, target).ok());
  auto send = [&](uint64_t seq) {
    a.value()->send_to_endpoint(b.value()->endpoint(), protocol::Heartbeat{.seq = seq});
  };

  // Idle: each frame is sent once the previous one and its forward are handled and the target has parked.
  constexpr uint64_t idle = 20, busy = 30;
  for (uint64_t seq = 1; seq <= idle; ++seq) {
    REQUIRE(eventually([&] { return seen.count() == 2 * (seq - 1) && parked(target); }));
    send(seq);
  }
  REQUIRE(eventually([&] { return seen.count() == 2 * idle && parked(target); }));
  // Busy: the target is held on the worker while frames idle+1 … idle+busy+1 reach the bridge. The last
  // one may be enqueued just after the release, and so find the target idle: only the first `busy` count.
  self->send(target, busy_atom::value);
  REQUIRE(eventually([&] { return gate.busy.load(); }));
  const uint64_t before = b.value()->stats().delivered;
  for (uint64_t seq = idle + 1; seq <= idle + busy + 1; ++seq) send(seq);
  REQUIRE(eventually([&] { return b.value()->stats().delivered == before + busy + 1; }));
  gate.release = true;
  REQUIRE(eventually([&] { return seen.count() == 2 * (idle + busy + 1); }));

  std::lock_guard lock(seen.mu);
  for (size_t i = 0; i < seen.frames.size(); ++i) {
    INFO("frame " << i + 1);
    CHECK(seen.frames[i].first == i + 1);  // in order, none lost
    if (i < idle) {  // idle: on the channel thread, neither the worker nor the test's thread
      CHECK(seen.frames[i].second != worker);
      CHECK(seen.frames[i].second != std::this_thread::get_id());
    } else if (i < idle + busy) {
      CHECK(seen.frames[i].second == worker);  // busy: through the scheduler
    }
  }
  for (const auto& [seq, thread] : seen.forwarded) CHECK(thread == worker);  // never chained inline
  b.value()->stop();
  a.value()->stop();
}

TEST_CASE("bridge: no ZMTP heartbeats from a router's process or to a router", "[actors][bridge]") {
  const LivenessConfig instance{std::chrono::milliseconds(100), 3, false, {"tcp://127.0.0.1:1"}};
  auto a = Bridge::start("alice", 1, "tcp://127.0.0.1:*", {}, instance);
  REQUIRE(a.ok());
  auto peer = [](std::string id, std::string role, std::string endpoint) {
    protocol::PeerInfo p;
    p.instance_id = std::move(id);
    p.role = std::move(role);
    p.control_endpoint = std::move(endpoint);
    p.incarnation = 5;
    return p;
  };
  const auto router = peer("router-1", "router", "tcp://127.0.0.1:2");
  const auto decode = peer("decode-0", "decode", "tcp://127.0.0.1:3");
  a.value()->peers().upsert(router);
  a.value()->peers().upsert(decode);
  CHECK_FALSE(a.value()->transport_heartbeats_to("tcp://127.0.0.1:1"));  // the registry, before any PEERS
  CHECK_FALSE(a.value()->transport_heartbeats_to(router.control_endpoint));
  CHECK(a.value()->transport_heartbeats_to(decode.control_endpoint));
  CHECK(a.value()->transport_heartbeats_to("tcp://127.0.0.1:4"));  // not listed yet: a peer of rooms

  auto r = Bridge::start("router-0", 1, "tcp://127.0.0.1:*", {},
                         LivenessConfig{std::chrono::milliseconds(100), 3, true});
  REQUIRE(r.ok());
  r.value()->peers().upsert(decode);
  CHECK_FALSE(r.value()->transport_heartbeats_to(decode.control_endpoint));
  a.value()->stop();
  r.value()->stop();
}

// A process's answers can arrive before the actor that asked has subscribed (a router's own registry
// answers its HELLO at once). Until the process is wired, a frame nobody takes is kept, up to
// kMaxEarlyFrames, and routed in order at wired(); one still unclaimed then is answered as usual.
TEST_CASE("bridge keeps frames that arrive before its process is wired and routes them then",
          "[actors][bridge]") {
  AliceAndBob f;
  auto &a = f.a, &b = f.b;
  auto& self = f.self;
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  a.value()->wired();  // b is not: its actors are "still subscribing"
  caf::scoped_actor alice_errors{f.sys};
  REQUIRE(a.value()->subscribe(protocol::MessageType::error, caf::actor_cast<caf::actor>(alice_errors)).ok());

  const uint32_t kept = Bridge::kMaxEarlyFrames, over = 10;
  a.value()->send_to_endpoint(b.value()->endpoint(), protocol::Goodbye{"nobody takes this"});
  for (uint32_t seq = 1; seq < kept + over; ++seq)
    a.value()->send_to_endpoint(b.value()->endpoint(), protocol::Heartbeat{.seq = seq});
  // Past the bound, frames are dropped (their senders repeat them), not kept without limit.
  REQUIRE(eventually([&] { return b.value()->stats().undeliverable == over; }));
  CHECK(b.value()->stats().delivered == 0);

  REQUIRE(b.value()->subscribe(protocol::MessageType::heartbeat, caf::actor_cast<caf::actor>(self)).ok());
  b.value()->wired();
  a.value()->send_to_endpoint(b.value()->endpoint(), protocol::Heartbeat{.seq = 100000});
  uint32_t expected = 1;
  bool in_order = true;
  for (uint32_t i = 0; i < kept; ++i) {
    auto env = next_envelope(self);
    REQUIRE(env);
    const auto seq = std::get<protocol::Heartbeat>(env->body).seq;
    in_order = in_order && seq == (expected == kept ? 100000 : expected);
    ++expected;
  }
  CHECK(in_order);  // the kept heartbeats 1..kMaxEarlyFrames-1, then the one sent after wired()
  // The GOODBYE nobody took is answered now, as a frame after wired() would be.
  std::optional<protocol::Envelope> err;
  alice_errors->receive([&](protocol::Envelope& e) { err = std::move(e); },
                        caf::after(std::chrono::seconds(5)) >> [] {});
  REQUIRE(err);
  REQUIRE(std::holds_alternative<protocol::ErrorReply>(err->body));
  CHECK(std::get<protocol::ErrorReply>(err->body).code == ErrorCode::unexpected_message);
  CHECK(b.value()->stats().undeliverable == over + 1);
  a.value()->stop();
  b.value()->stop();
}
