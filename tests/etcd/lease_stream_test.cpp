// Lease renewals over etcd's gRPC LeaseKeepAlive stream, against a real etcd: what the membership's session
// renews with. The JSON gateway's renewals (etcd_client_test.cpp) are the reference for the answers.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "../common/no_free_descriptors.hpp"
#include "epd/etcd/etcd_client.hpp"
#include "epd/etcd/lease_stream.hpp"
#include "etcd_server.hpp"

using namespace epd;
using namespace std::chrono_literals;
using etcd::EtcdClient;
using etcd::LeaseStream;
using protocol::ErrorCode;

namespace {

std::vector<etcd::Endpoint> endpoints(const std::vector<std::string>& urls) {
  std::vector<etcd::Endpoint> out;
  for (const auto& u : urls) {
    auto e = etcd::parse_endpoint(u);
    REQUIRE(e);
    out.push_back(*e);
  }
  return out;
}

EtcdClient client_for(const std::string& url) {
  auto c = EtcdClient::create({{url}, 2000ms});
  REQUIRE(c);
  return std::move(*c);
}

}  // namespace

TEST_CASE("etcd lease stream renews on one stream and answers 0 for a lease etcd does not hold") {
  testing::EtcdServer server;
  server.start();
  auto c = client_for(server.url());
  auto lease = c.grant(2s);
  REQUIRE(lease);
  REQUIRE(c.put("/s/instances/x", "x", lease->id));
  auto traffic = std::make_shared<etcd::Traffic>();
  LeaseStream stream(endpoints({server.url()}), 2000ms, traffic);
  // Renewed over three TTLs on the one stream: the key stays, and each answer is the TTL the gateway gives.
  for (int i = 0; i < 12; ++i) {
    auto left = stream.keep_alive(lease->id);
    REQUIRE(left);
    CHECK(*left == 2);
    std::this_thread::sleep_for(500ms);
  }
  CHECK(stream.opened() == 1);
  CHECK(traffic->connections == 1);
  CHECK(traffic->calls == 12);
  REQUIRE(c.range_prefix("/s/instances/")->kvs.size() == 1);
  CHECK(*c.keep_alive(lease->id) == 2);  // the gateway agrees

  // Revoked (or expired, or never granted): 0, as through the gateway, on the same stream.
  REQUIRE(c.revoke(lease->id));
  auto gone = stream.keep_alive(lease->id);
  REQUIRE(gone);
  CHECK(*gone == 0);
  auto never = stream.keep_alive(0x1234567);
  REQUIRE(never);
  CHECK(*never == 0);
  CHECK(stream.opened() == 1);
  CHECK(c.range_prefix("/s/instances/")->kvs.empty());

  // Several at once, answered in order: each its own TTL, 0 for the one etcd does not hold.
  auto a = c.grant(4s), b = c.grant(6s);
  REQUIRE(a);
  REQUIRE(b);
  auto both = stream.keep_alive(std::vector<int64_t>{a->id, lease->id, b->id});
  REQUIRE(both);
  CHECK(*both == std::vector<int64_t>{4, 0, 6});
  CHECK(stream.keep_alive(std::vector<int64_t>{})->empty());
  CHECK(stream.opened() == 1);
}

TEST_CASE("etcd lease stream skips a dead endpoint, gives up at its timeout, and opens a new stream after") {
  testing::EtcdServer server;
  server.start();
  auto c = client_for(server.url());
  auto lease = c.grant(60s);
  REQUIRE(lease);
  const std::string dead = "http://127.0.0.1:" + std::to_string(testing::free_port());
  LeaseStream stream(endpoints({dead, server.url()}), 500ms);
  REQUIRE(stream.keep_alive(lease->id));

  // A frozen etcd takes the frame but never answers: the renewal fails at its timeout, not later.
  server.freeze();
  auto t0 = std::chrono::steady_clock::now();
  auto frozen = stream.keep_alive(lease->id);
  server.thaw();
  REQUIRE_FALSE(frozen);
  CHECK(frozen.error().code == ErrorCode::timeout);
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);
  auto back = stream.keep_alive(lease->id);
  REQUIRE(back);
  CHECK(*back == 60);
  CHECK(stream.opened() == 2);

  // etcd restarts: the stream breaks under the renewal, which says so; the next opens a new one.
  server.stop();
  auto down = stream.keep_alive(lease->id);
  REQUIRE_FALSE(down);
  CHECK((down.error().code == ErrorCode::io_error || down.error().code == ErrorCode::peer_unreachable));
  server.start();
  auto after = stream.keep_alive(lease->id);
  REQUIRE(after);
  CHECK(*after > 0);

  // No descriptor for a socket: an error like any other, and it renews again once there are some.
  LeaseStream fresh(endpoints({server.url()}), 500ms);
  testing::NoFreeDescriptors none;
  REQUIRE(none.active());
  auto starved = fresh.keep_alive(lease->id);
  none.restore();
  REQUIRE_FALSE(starved);
  CHECK(starved.error().code == ErrorCode::peer_unreachable);
  CHECK(fresh.keep_alive(lease->id));

  LeaseStream nowhere(endpoints({dead}), 500ms);
  auto none_there = nowhere.keep_alive(lease->id);
  REQUIRE_FALSE(none_there);
  CHECK(none_there.error().code == ErrorCode::peer_unreachable);
  CHECK(none_there.error().detail.find(dead.substr(7)) != std::string::npos);  // names the endpoint
}
