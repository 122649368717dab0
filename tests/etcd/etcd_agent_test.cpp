// The membership's etcd session against a real etcd: its renewals go over one gRPC keep-alive stream (etcd's
// own counters say how many streams it served), and through the JSON gateway when the way to etcd speaks
// only HTTP/1.1 (here a proxy in the test).
#include <httplib.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "epd/etcd/etcd_client.hpp"
#include "etcd_server.hpp"
#include "membership/etcd/etcd_agent.hpp"

using namespace epd;
using namespace std::chrono_literals;

namespace {

struct Session {
  caf::actor_system_config cfg;
  caf::actor_system system{cfg};
  std::shared_ptr<std::atomic<int>> registered = std::make_shared<std::atomic<int>>(0);
  std::unique_ptr<actors::etcd_backend::Agent> agent;

  Session(const std::string& url, std::chrono::milliseconds ttl) {
    auto client = etcd::EtcdClient::create({{url}, 1000ms});
    REQUIRE(client);
    auto news = system.spawn(
        [](std::shared_ptr<std::atomic<int>> count) -> caf::behavior {
          return {[count](const actors::etcd_backend::SessionNews& n) {
            if (n.registered) ++*count;
          }};
        },
        registered);
    actors::etcd_backend::AgentConfig ac;
    ac.prefix = "/a/";
    ac.lease_ttl = ttl;
    ac.watch = false;
    protocol::PeerInfo self;
    self.instance_id = "decode-0";
    self.role = "decode";
    self.control_endpoint = "tcp://127.0.0.1:1";
    self.incarnation = 7;
    agent = std::make_unique<actors::etcd_backend::Agent>(std::move(*client), ac, self, news);
    agent->start();
  }
  ~Session() { agent->stop(false); }
};

// The lease our record is under, 0 while there is none.
int64_t record_lease(const etcd::EtcdClient& c) {
  auto listed = c.range_prefix("/a/instances/");
  REQUIRE(listed);
  return listed->kvs.empty() ? 0 : listed->kvs[0].lease;
}

// A session through `url` for three TTLs of 2 s: its record must stay under the lease it first registered
// with (renewed every TTL/3), and it must register once. The lease, for the caller to revoke.
int64_t keeps_its_record(const std::string& url, const etcd::EtcdClient& direct) {
  Session s(url, 2000ms);
  int64_t lease = 0;
  for (int i = 0; i < 50 && lease == 0; ++i, std::this_thread::sleep_for(50ms)) lease = record_lease(direct);
  REQUIRE(lease != 0);
  std::this_thread::sleep_for(6s);
  CHECK(record_lease(direct) == lease);
  CHECK(*s.registered == 1);
  return lease;
}

}  // namespace

TEST_CASE("etcd session renews its lease on one gRPC stream, or through the gateway behind HTTP/1.1") {
  testing::EtcdServer server;
  server.start();
  auto direct = etcd::EtcdClient::create({{server.url()}, 2000ms});
  REQUIRE(direct);
  const double streams0 = server.keep_alive_metric("grpc_server_started_total");
  const double renewals0 = server.keep_alive_metric("grpc_server_msg_received_total");

  // Directly: every renewal on one stream.
  const int64_t lease = keeps_its_record(server.url(), *direct);
  CHECK(server.keep_alive_metric("grpc_server_started_total") - streams0 == 1);
  CHECK(server.keep_alive_metric("grpc_server_msg_received_total") - renewals0 >= 6);
  REQUIRE(direct->revoke(lease));

  // Behind a proxy that speaks only HTTP/1.1 there is no stream: each renewal waits out the stream's timeout
  // (1 s here) and goes through the gateway, and after three the gateway alone renews; etcd counts a stream
  // per renewal, and the record still stays under its first lease.
  httplib::Server proxy;
  proxy.Post(R"(/v3/.*)", [&](const httplib::Request& req, httplib::Response& res) {
    httplib::Client up("127.0.0.1", server.client_port());
    auto r = up.Post(req.path, req.body, "application/json");
    if (!r) {
      res.status = 502;
      return;
    }
    res.status = r->status;
    res.set_content(r->body, "application/json");
  });
  const int port = proxy.bind_to_any_port("127.0.0.1");
  REQUIRE(port > 0);
  std::thread serving([&] { proxy.listen_after_bind(); });
  const double streams1 = server.keep_alive_metric("grpc_server_started_total");
  keeps_its_record("http://127.0.0.1:" + std::to_string(port), *direct);
  CHECK(server.keep_alive_metric("grpc_server_started_total") - streams1 >= 4);
  proxy.stop();
  serving.join();
}
