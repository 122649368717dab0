// Version and model skew (docs/protocol.md, "Compatibility"), with real processes: an instance of a build
// that speaks only an older protocol revision, and one serving another model, are refused by the registry
// with a reason naming both sides' values, counted once, never listed and never given work; a build that
// speaks a newer revision as well as ours joins, and serves requests alone once the current decode is gone.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "cluster.hpp"
#include "epd/protocol/compat.hpp"
#include "etcd_server.hpp"

using namespace epd;
using namespace epd::testing;

namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The value of `name{labels}` in a scrape where every given label matches; 0 when absent.
double sample(const std::string& text, const std::string& name,
              const std::map<std::string, std::string>& labels) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + "{", 0) != 0) continue;
    bool all = true;
    for (const auto& [k, v] : labels) all = all && line.find(k + "=\"" + v + "\"") != std::string::npos;
    if (all) return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return 0;
}

// Polls `done` every 100 ms for up to `ms`.
template <class F>
bool eventually(F&& done, int ms = 10000) {
  for (int waited = 0; waited < ms; waited += 100) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return done();
}

// Starts the cluster of `spec` plus three more decodes (the revision before our oldest only, our newest and
// the next, another model) and checks who is refused, why, how often, and that the newer build serves.
void check_skew(ClusterSpec spec) {
  const std::string older = std::to_string(protocol::kOldestProtocolRevision - 1);
  const std::string ours = std::to_string(protocol::kProtocolRevision);
  const std::string newer = ours + ".." + std::to_string(protocol::kProtocolRevision + 1);
  spec.metrics = true;
  spec.restart = false;
  for (const char* id : {"decode-old", "decode-new", "decode-other"})
    spec.extra_sections += std::string("[[instance]]\nid = \"") + id + "\"\nrole = \"decode\"\ncontrol = " +
                           "\"tcp://127.0.0.1:" + std::to_string(free_port()) + "\"\n\n";
  Cluster cluster(spec);
  cluster.start();

  // The same cluster file with another model: what a decode pointed at the wrong model would load.
  const auto other_config = cluster.dir() / "other-model.toml";
  std::ofstream(other_config) << std::regex_replace(read_file(cluster.config_file()),
                                                    std::regex("preset = \"tiny\""), "preset = \"bench\"");
  const std::string decode = std::string(EPD_BIN_DIR) + "/epd-decode";
  auto sink = std::make_shared<MemorySink>();
  launcher::GroupOptions opts;
  opts.restart.enabled = false;
  launcher::ProcessGroup extra(opts, sink);
  REQUIRE(extra
              .start({{"decode-old",
                       {"/usr/bin/env", "EPD_TEST_PROTOCOL_REVISIONS=" + older, decode, "--config",
                        cluster.config_file().string(), "--id", "decode-old"}},
                      {"decode-new",
                       {"/usr/bin/env", "EPD_TEST_PROTOCOL_REVISIONS=" + newer, decode, "--config",
                        cluster.config_file().string(), "--id", "decode-new"}},
                      {"decode-other", {decode, "--config", other_config.string(), "--id", "decode-other"}}})
              .ok());
  INFO("cluster:\n" << cluster.logs() << "\nextra instances:\n" << sink->text());

  // The newer build is listed and healthy; the other two are refused, each once, with both sides named.
  CHECK(cluster
            .instance_when(
                "decode-new", [](const nlohmann::json& e) { return e.value("healthy", false); }, 15000)
            .value("healthy", false));
  REQUIRE(eventually([&] {
    const std::string logs = sink->text();
    return logs.find("[decode-old]") != std::string::npos &&
           logs.find("no protocol revision in common") != std::string::npos &&
           logs.find("not the same model") != std::string::npos;
  }));
  // Both sides refuse, and say why with both values: the instance refuses the registry's HELLO_ACK...
  const std::string logs = sink->text();
  // (the registry's HELLO_ACK, or with etcd the router's record)
  CHECK(std::regex_search(logs, std::regex("refusing (registry|router) 'router'")));
  const std::string our_range =
      protocol::kOldestProtocolRevision == protocol::kProtocolRevision
          ? "revision " + ours
          : "revisions " + std::to_string(protocol::kOldestProtocolRevision) + ".." + ours;
  CHECK(logs.find("'router' speaks " + our_range) != std::string::npos);
  CHECK(logs.find("'decode-old' revision " + older) != std::string::npos);
  CHECK(logs.find("'decode-other' 'bench'") != std::string::npos);
  // ... and the registry refuses its HELLO.
  REQUIRE(
      eventually([&] { return cluster.logs().find("refusing decode 'decode-other'") != std::string::npos; }));
  const std::string router = cluster.logs();
  CHECK(router.find("refusing decode 'decode-old'") != std::string::npos);
  CHECK(router.find("'decode-old' speaks revision " + older) != std::string::npos);
  CHECK(router.find("'decode-other' serves 'bench'") != std::string::npos);
  CHECK(cluster.instance("decode-old").is_null());
  CHECK(cluster.instance("decode-other").is_null());
  const auto entry = cluster.instance("decode-new");
  CHECK(entry.value("protocol", 0) == protocol::kProtocolRevision + 1);
  CHECK(entry.value("protocol_oldest", 0) == protocol::kProtocolRevision);
  CHECK(entry.value("model", "") == "tiny");
  // They keep saying HELLO every heartbeat; each incarnation is counted once.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const std::string scrape = cluster.scrape("router");
  CHECK(sample(scrape, "epd_peers_refused_total", {{"reason", "protocol"}, {"peer_role", "decode"}}) == 1);
  CHECK(sample(scrape, "epd_peers_refused_total", {{"reason", "model"}, {"peer_role", "decode"}}) == 1);

  // With the current decode gone, the newer build serves every request; the refused ones get none.
  ::kill(cluster.pid("decode-0"), SIGKILL);
  REQUIRE(eventually([&] {
    const auto entry = cluster.instance("decode-0");  // once: it may vanish between two reads
    return entry.is_null() || !entry.value("healthy", true);
  }));
  for (int i = 0; i < 6; ++i) {
    const auto [status, body] =
        cluster.generate({{"prompt", "skew " + std::to_string(i)}, {"max_tokens", 4}});
    INFO(body.dump());
    CHECK(status == 200);
  }
  CHECK(extra.status("decode-old")->state == launcher::ChildState::running);
  CHECK(extra.status("decode-other")->state == launcher::ChildState::running);
  extra.stop();
}

}  // namespace

TEST_CASE(
    "version skew: an older protocol or another model is refused by name, a newer build joins and serves",
    "[e2e][multiproc]") {
  check_skew(ClusterSpec{});
}

TEST_CASE("version skew with membership in etcd: the same refusals through the records", "[e2e][multiproc]") {
  EtcdServer etcd;
  etcd.start();
  ClusterSpec spec;
  spec.etcd_endpoints = {etcd.url()};
  check_skew(spec);
}
