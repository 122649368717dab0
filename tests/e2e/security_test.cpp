// The control plane under CURVE (docs/architecture.md, "Control plane authentication"): a whole cluster
// with keys serves; peers without the cluster's keys cannot register, learn a descriptor or make a role do
// anything, and each refusal is counted in epd_control_refused_peers_total. A config that listens beyond
// loopback without keys does not start.
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <sstream>
#include <zmq.hpp>

#include "cluster.hpp"
#include "epd/protocol/codec.hpp"
#include "epd/transport/curve_keys.hpp"
#include "workload.hpp"

using namespace epd;
using namespace epd::testing;

namespace {

// Sum of a counter over a scrape (the value of every line of the family, any labels).
double counter(const std::string& text, const std::string& name) {
  double sum = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name + "{", 0) == 0 || line.rfind(name + " ", 0) == 0)
      sum += std::stod(line.substr(line.rfind(' ') + 1));
  return sum;
}

// A rogue with its own key (or none) that believes it knows the server's public key.
struct Rogue {
  zmq::socket_t s;
  Rogue(zmq::context_t& ctx, const transport::CurveKeyPair* key, const std::string& server_key,
        const std::string& endpoint)
      : s(ctx, zmq::socket_type::dealer) {
    s.set(zmq::sockopt::routing_id, "intruder");
    s.set(zmq::sockopt::linger, 0);
    if (key) {
      s.set(zmq::sockopt::curve_serverkey, server_key);
      s.set(zmq::sockopt::curve_publickey, key->public_key);
      s.set(zmq::sockopt::curve_secretkey, key->secret_key);
    }
    s.connect(endpoint);
  }
  void send(protocol::Body body) {
    s.send(zmq::buffer(protocol::encode({"intruder", 1, std::move(body)})), zmq::send_flags::dontwait);
  }
};

}  // namespace

TEST_CASE("curve: peers without the cluster's keys cannot register or reach a role and are counted",
          "[e2e][multiproc]") {
  ClusterSpec spec;
  spec.curve = true;
  spec.metrics = true;
  Cluster cluster(spec);
  cluster.start();
  INFO(cluster.logs());
  run_and_compare(cluster, 2, 1);

  // Keys a rogue might hold: fresh ones, and valid keys of another cluster (made by the same keygen).
  const auto stranger = transport::generate_curve_key_pair();
  const auto other_dir = cluster.dir() / "other-cluster";
  REQUIRE(transport::write_cluster_keys(other_dir, {"router", "prefill-0"}, false));
  const auto foreign = transport::read_curve_key_file(other_dir / "router.key");
  REQUIRE(stranger);
  REQUIRE(foreign);
  const auto listed = transport::read_authorized_keys(cluster.dir() / "keys" / "cluster.pub");
  REQUIRE(listed);
  auto server_key = [&](const std::string& id) {
    for (const auto& [i, k] : *listed)
      if (i == id) return k;
    return std::string();
  };

  // Where the registry would send PEERS (with every segment descriptor) to the rogue: a plain ROUTER.
  zmq::context_t ctx;
  zmq::socket_t trap(ctx, zmq::socket_type::router);
  trap.set(zmq::sockopt::linger, 0);
  trap.bind("tcp://127.0.0.1:*");
  const std::string trap_endpoint = trap.get(zmq::sockopt::last_endpoint);

  std::vector<std::unique_ptr<Rogue>> rogues;
  for (const transport::CurveKeyPair* key :
       {&*stranger, &*foreign, (const transport::CurveKeyPair*)nullptr}) {
    // HELLO to the registry: would register it and earn PEERS.
    auto r = std::make_unique<Rogue>(ctx, key, server_key("router"), cluster.control_endpoint("router"));
    // A build the registry would accept: only CURVE may keep it out.
    r->send(protocol::Hello{"intruder", trap_endpoint, {}, {}, 0, tiny_identity()});
    rogues.push_back(std::move(r));
    // SUBMIT to prefill and decode: would make them reserve pages and compute.
    for (const std::string id : {"prefill-0", "decode-0"}) {
      auto w = std::make_unique<Rogue>(ctx, key, server_key(id), cluster.control_endpoint(id));
      protocol::Submit submit;
      submit.room = 4242;
      submit.prompt = {1, 2, 3, 4};
      w->send(submit);
      rogues.push_back(std::move(w));
    }
  }
  // Every target counts its refusals (three rogues each: two keys, one without CURVE).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (const std::string id : {"router", "prefill-0", "decode-0"}) {
    INFO(id);
    double refused = 0;
    while ((refused = counter(cluster.scrape(id), "epd_control_refused_peers_total")) < 3 &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK(refused >= 3);
  }
  CHECK(counter(cluster.scrape("encoder-0"), "epd_control_refused_peers_total") == 0);

  // Nothing reached anyone: no answer to a rogue, no PEERS at the trap, no intruder registered, no room.
  for (auto& r : rogues) {
    zmq::message_t m;
    CHECK_FALSE(r->s.recv(m, zmq::recv_flags::dontwait));
  }
  zmq::message_t m;
  CHECK_FALSE(trap.recv(m, zmq::recv_flags::dontwait));
  CHECK(cluster.instance("intruder").is_null());
  CHECK(cluster.instances().size() == 4);
  cluster.wait_all_free();
  for (const std::string id : {"prefill-0", "decode-0"})
    CHECK(counter(cluster.scrape(id), "epd_rooms_active") == 0);
  CHECK(cluster.logs().find("is not in the cluster's keys") != std::string::npos);

  // The cluster kept serving throughout.
  run_and_compare(cluster, 4, 2);
}

TEST_CASE("curve: a config listening beyond loopback without keys does not start and says why",
          "[e2e][multiproc]") {
  const auto dir = std::filesystem::temp_directory_path() / ("epd-noloop-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "cluster.toml")
      << "[[instance]]\nid = \"router\"\nrole = \"router\"\ncontrol = \"tcp://0.0.0.0:" << free_port()
      << "\"\n";
  launcher::GroupOptions opts;
  auto sink = std::make_shared<MemorySink>();
  launcher::ProcessGroup group(opts, sink);
  REQUIRE(group.start({{"router",
                        {std::string(EPD_BIN_DIR) + "/epd-router", "--config",
                         (dir / "cluster.toml").string(), "--id", "router"}}}));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (group.status()[0].state == launcher::ChildState::running &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  group.stop();
  std::filesystem::remove_all(dir);
  INFO(sink->text());
  CHECK(sink->text().find("is not a loopback address") != std::string::npos);
  CHECK(sink->text().find("epd-keygen") != std::string::npos);
}
