#pragma once
// Several roles in one process under CAF's test coordinator, spawned exactly as the runner spawns them
// (builtin_roles()), each with its own offline bridge and in-process transfer engine. The roles' compute and
// transfer actors run scheduled (RoleContext::detached_workers = false), so a room's whole path - encode,
// chunked prefill, page writes, decode steps - runs on the test's thread, one message at a time. The test
// plays the router and every peer that is not a role here ("bare" nodes: an engine the roles can write into,
// messages the test sends itself).
//
// The engines speak shm: a write is a memcpy complete when submit() returns, so a transfer worker's batch
// completes on the worker's own (the test's) thread. tcp completes batches from its I/O thread, which must
// not enqueue into the test coordinator.
#include <memory>
#include <string>
#include <vector>

#include "epd/actors/membership/membership.hpp"
#include "epd/actors/role_registry.hpp"
#include "epd/config/cluster_config.hpp"
#include "epd/model/config.hpp"
#include "role_harness.hpp"

namespace epd::test {

struct Node {
  std::string id;
  std::string role;
  uint64_t incarnation = 0;
  std::unique_ptr<transport::Engine> engine;
  actors::BridgePtr bridge;
  actors::RoleContext ctx;
  caf::actor main;  // invalid for a bare node
  std::optional<protocol::KvLayout> kv_layout;
};

class RoleCluster {
 public:
  explicit RoleCluster(const char* toml) {
    auto cfg = config::parse_cluster_config(toml, "role_cluster.toml");
    REQUIRE(cfg.ok());
    cluster_ = std::move(cfg.value());
    auto m = model::preset("tiny");
    REQUIRE(m.ok());
    model_ = *m;
  }
  RoleCluster(const RoleCluster&) = delete;
  RoleCluster& operator=(const RoleCluster&) = delete;
  // The actors go before the engines whose memory they use.
  ~RoleCluster() { h.shutdown(); }

  const model::ModelConfig& model() const { return model_; }

  // A node for instance `id` of the cluster config; `spawn`: run its role (else the test plays it).
  Node& add(const std::string& id, uint64_t incarnation, bool spawn = true) {
    const auto* inst = cluster_.find(id);
    REQUIRE(inst);
    auto node = std::make_unique<Node>();
    node->id = id;
    node->role = inst->role;
    node->incarnation = incarnation;
    auto ec = config::engine_config_for(*inst);
    REQUIRE(ec.ok());
    ec->incarnation = incarnation;
    auto e = transport::Engine::create(*ec);
    REQUIRE(e.ok());
    node->engine = std::move(e.value());
    node->bridge = h.offline_bridge(id, incarnation);
    node->ctx.system = &h.system();
    node->ctx.cluster = &cluster_;
    node->ctx.instance = inst;
    node->ctx.bridge = node->bridge;
    node->ctx.engine = node->engine.get();
    node->ctx.model = model_;
    node->ctx.detached_workers = false;
    if (spawn) {
      auto handle = actors::builtin_roles().find(inst->role)->spawn(node->ctx);
      REQUIRE(handle.ok());
      node->main = h.keep(handle->main);
      node->kv_layout = handle->kv_layout;
    }
    nodes_.push_back(std::move(node));
    return *nodes_.back();
  }

  // Every bridge's peer directory lists the router and every node with its segment, as membership would
  // have applied the registry's PEERS. Call after the nodes allocated their regions.
  void publish(uint64_t router_incarnation) {
    std::vector<protocol::PeerInfo> peers{peer("router", "router", router_incarnation)};
    for (auto& n : nodes_) {
      auto p = peer(n->id, n->role, n->incarnation);
      p.segment = n->engine->descriptor();
      p.kv_layout = n->kv_layout;
      peers.push_back(std::move(p));
    }
    ++version_;
    for (auto& n : nodes_) (void)n->bridge->peers().replace(version_, peers);
    h.run();
  }

  Node* find(const std::string& id) {
    for (auto& n : nodes_)
      if (n->id == id) return n.get();
    return nullptr;
  }

  // Runs the actors and hands every frame a role node sent to another role node to it, until nothing moves.
  // Returns the frames for the router and the bare nodes (the test's to check), in the order they were sent.
  std::vector<Sent> pump() {
    std::vector<Sent> out;
    for (bool moved = true; moved;) {
      h.run();
      moved = route(out);
    }
    return out;
  }

  // One pass without running anything: hands the frames role nodes sent so far to the role nodes they are
  // for (queued, not handled yet) and appends the others to `out`. Returns whether any frame was handed on.
  // For tests that step the actors one message at a time (sched().try_run_once()).
  bool route(std::vector<Sent>& out) {
    bool moved = false;
    for (auto& n : nodes_) {
      for (auto& s : sent(*n->bridge)) {
        const std::string prefix = "offline://";
        const std::string to = s.reply || s.to.rfind(prefix, 0) != 0 ? s.to : s.to.substr(prefix.size());
        Node* dst = find(to);
        if (dst && dst->main) {
          dst->bridge->receive_frame(n->id, true, protocol::encode(s.env));
          moved = true;
        } else {
          out.push_back(std::move(s));
        }
      }
    }
    return moved;
  }

  // `body` from `from` (the router or a bare node) to role node `to`; nothing runs yet.
  void send(const std::string& from, uint64_t incarnation, const std::string& to, protocol::Body body) {
    deliver(*find(to)->bridge, from, incarnation, std::move(body));
  }

  Harness h;

 private:
  config::ClusterConfig cluster_;
  model::ModelConfig model_;
  std::vector<std::unique_ptr<Node>> nodes_;
  uint64_t version_ = 0;
};

// The frames in `frames` sent to node `id`.
inline std::vector<Sent> to_node(const std::vector<Sent>& frames, const std::string& id) {
  std::vector<Sent> out;
  for (const auto& f : frames)
    if (f.to == "offline://" + id || (f.reply && f.to == id)) out.push_back(f);
  return out;
}

// The frames in `frames` that node `id` sent.
inline std::vector<Sent> from_node(const std::vector<Sent>& frames, const std::string& id) {
  std::vector<Sent> out;
  for (const auto& f : frames)
    if (f.env.sender == id) out.push_back(f);
  return out;
}

}  // namespace epd::test
