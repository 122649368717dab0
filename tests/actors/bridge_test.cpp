// The bridge over real ZeroMQ sockets on 127.0.0.1: typed delivery, and bad frames rejected with an ERROR
// reply while the bridge keeps serving.
#include <caf/all.hpp>
#include <catch2/catch.hpp>
#include <zmq.hpp>

#include "epd/actors/bridge.hpp"

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

}  // namespace

TEST_CASE("bridge delivers typed messages and rejects bad frames without stopping", "[actors][bridge]") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto a = Bridge::start("alice", 11, "tcp://127.0.0.1:*");
  auto b = Bridge::start("bob", 22, "tcp://127.0.0.1:*");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  b.value()->set_default(caf::actor_cast<caf::actor>(self));

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
