// One LeaseKeeper keeping many records alive against a real etcd: what every instance's record is kept by
// (one keeper per instance in a real process, one per process in epd-bench membership's simulated fleet).
// etcd's own gRPC counters say how many keep-alive streams it served and how many renewals it got.
#include <httplib.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "epd/etcd/etcd_client.hpp"
#include "epd/etcd/lease_keeper.hpp"
#include "etcd_server.hpp"

using namespace epd;
using namespace std::chrono_literals;
using etcd::EtcdClient;
using etcd::LeaseKeeper;

// Named, not anonymous: the test sources are built as one unit (unity build).
namespace keeper_test {

EtcdClient keeper_client(const std::string& url, std::chrono::milliseconds timeout = 2000ms) {
  auto c = EtcdClient::create({{url}, timeout});
  REQUIRE(c);
  return std::move(*c);
}

// What the owners heard: registrations and spells of trouble, per record.
struct Heard {
  std::atomic<int> registered{0}, trouble{0};
  LeaseKeeper::News news() {
    return [this](bool ok, const std::string&) { ++(ok ? registered : trouble); };
  }
};

std::string key_of(int i) {
  return "/k/instances/sim-" + std::to_string(i);
}

// key -> lease of every record under /k/instances/.
std::map<std::string, int64_t> listed(const EtcdClient& c) {
  auto r = c.range_prefix("/k/instances/");
  REQUIRE(r);
  std::map<std::string, int64_t> out;
  for (const auto& kv : r->kvs) out[kv.key] = kv.lease;
  return out;
}

bool within(const std::function<bool()>& done, std::chrono::milliseconds limit) {
  for (auto end = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < end;) {
    if (done()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return done();
}

}  // namespace keeper_test

using namespace keeper_test;

TEST_CASE("etcd lease keeper keeps many records on one stream each under its own lease in batches") {
  testing::EtcdServer server;
  server.start();
  auto direct = keeper_client(server.url());
  const double streams0 = server.keep_alive_metric("grpc_server_started_total");
  const double renewals0 = server.keep_alive_metric("grpc_server_msg_received_total");

  constexpr int kRecords = 40;
  std::vector<Heard> heard(kRecords);
  LeaseKeeper keeper(keeper_client(server.url()));
  std::vector<LeaseKeeper::Handle> handles;
  for (int i = 0; i < kRecords; ++i)
    handles.push_back(keeper.keep(key_of(i), "v" + std::to_string(i), 3000ms, heard[i].news()));
  REQUIRE(within([&] { return listed(direct).size() == kRecords; }, 10s));
  const auto first = listed(direct);
  std::set<int64_t> leases;
  for (const auto& [key, lease] : first) leases.insert(lease);
  CHECK(leases.size() == kRecords);  // a lease each: one record's end is not another's
  CHECK(leases.count(0) == 0);

  // Two TTLs: every record stays under its first lease, renewed every TTL/3 (1 s) on one stream, the
  // renewals due within a tenth of that period sent as one batch.
  const uint64_t batches0 = keeper.batches();
  std::this_thread::sleep_for(6s);
  CHECK(listed(direct) == first);
  for (auto& h : heard) CHECK(h.registered == 1);
  for (auto& h : heard) CHECK(h.trouble == 0);
  CHECK(server.keep_alive_metric("grpc_server_started_total") - streams0 == 1);
  const double renewals = server.keep_alive_metric("grpc_server_msg_received_total") - renewals0;
  CHECK(renewals >= kRecords * 5);  // 6 per record in 6 s, give or take the first
  CHECK(renewals <= kRecords * 8);
  const uint64_t batches = keeper.batches() - batches0;
  CHECK(batches >= 5);
  CHECK(batches <= 14);  // the 40 records joined within ~100 ms: one batch a period, not 40

  // Released without a revoke (a kill -9): its record stays until its lease runs out; with one, it goes
  // at once. The others stay.
  keeper.release(handles[0], false);
  keeper.release(handles[1], true);
  auto now = listed(direct);
  CHECK(now.count(key_of(0)) == 1);
  CHECK(now.count(key_of(1)) == 0);
  REQUIRE(within([&] { return listed(direct).count(key_of(0)) == 0; }, 6s));
  CHECK(listed(direct).size() == kRecords - 2);
  CHECK(keeper.size() == kRecords - 2);
}

TEST_CASE("etcd lease keeper puts a record again under a new lease and tells of etcd trouble once") {
  testing::EtcdServer server;
  server.start();
  auto direct = keeper_client(server.url());
  constexpr int kRecords = 20, kLate = 10;
  std::vector<Heard> heard(kRecords + kLate);
  LeaseKeeper keeper(keeper_client(server.url(), 1000ms), 200ms);
  for (int i = 0; i < kRecords; ++i) keeper.keep(key_of(i), "v", 10000ms, heard[i].news());
  REQUIRE(within([&] { return listed(direct).size() == kRecords; }, 10s));

  // etcd lost one lease (revoked here): its renewal says so, and the record is put again under a new one.
  const int64_t lost = listed(direct).at(key_of(3));
  REQUIRE(direct.revoke(lost));
  REQUIRE(within([&] { return listed(direct).count(key_of(3)) == 1; }, 8s));
  CHECK(listed(direct).at(key_of(3)) != lost);
  CHECK(heard[3].registered == 2);
  CHECK(listed(direct).size() == kRecords);

  // etcd stops answering. Records that join meanwhile hear of it within about one timeout of the client
  // (1 s), not one each: a round that cannot reach etcd does not try its other records. The others hear of
  // it at their next renewal. Each is told once, though the keeper retries every 200 ms.
  server.freeze();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = kRecords; i < kRecords + kLate; ++i) keeper.keep(key_of(i), "v", 10000ms, heard[i].news());
  auto told = [&](int from, int to) {
    for (int i = from; i < to; ++i)
      if (heard[i].trouble == 0) return false;
    return true;
  };
  const bool late_told = within([&] { return told(kRecords, kRecords + kLate); }, 8s);
  const auto took = std::chrono::steady_clock::now() - t0;
  const bool all_told = within([&] { return told(0, kRecords); }, 8s);
  std::this_thread::sleep_for(1000ms);
  server.thaw();
  REQUIRE(late_told);
  REQUIRE(all_told);
  CHECK(took < 4s);
  for (auto& h : heard) CHECK(h.trouble == 1);

  // etcd answers again: every record is registered again (under the lease it held, or a new one where that
  // ran out during the pause), the late ones for the first time.
  REQUIRE(within(
      [&] {
        for (int i = 0; i < kRecords + kLate; ++i)
          if (heard[i].registered < (i >= kRecords ? 1 : i == 3 ? 3 : 2)) return false;
        return true;
      },
      10s));
  CHECK(listed(direct).size() == kRecords + kLate);
}

TEST_CASE("etcd lease keeper renews on time while a burst of records joins") {
  testing::EtcdServer server;
  server.start();
  auto direct = keeper_client(server.url());
  // Between the keeper and etcd, a proxy that takes 50 ms per put: 80 joins then take over 4 s, longer
  // than the first record's TTL (3 s). It speaks HTTP/1.1 only, so renewals go through the gateway once
  // the stream failed (after its timeout, 500 ms here).
  httplib::Server proxy;
  proxy.Post(R"(/v3/.*)", [&](const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/v3/kv/put") std::this_thread::sleep_for(50ms);
    httplib::Client up("127.0.0.1", server.client_port());
    auto r = up.Post(req.path, req.body, "application/json");
    res.status = r ? r->status : 502;
    if (r) res.set_content(r->body, "application/json");
  });
  const int port = proxy.bind_to_any_port("127.0.0.1");
  REQUIRE(port > 0);
  std::thread serving([&] { proxy.listen_after_bind(); });
  {
    std::vector<Heard> heard(81);
    LeaseKeeper keeper(keeper_client("http://127.0.0.1:" + std::to_string(port), 500ms));
    keeper.keep(key_of(0), "first", 3000ms, heard[0].news());
    REQUIRE(within([&] { return heard[0].registered == 1; }, 5s));
    const int64_t lease = listed(direct).at(key_of(0));
    for (int i = 1; i <= 80; ++i) keeper.keep(key_of(i), "v", 20000ms, heard[i].news());
    REQUIRE(within([&] { return listed(direct).size() == 81; }, 20s));
    // The first record was renewed between the joins: never expired, never registered again.
    CHECK(listed(direct).at(key_of(0)) == lease);
    CHECK(heard[0].registered == 1);
  }
  proxy.stop();
  serving.join();
}
