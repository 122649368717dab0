#include "membership_sim.hpp"

#include <cstdio>
#include <thread>
#include <vector>

#include "epd/actors/membership/membership.hpp"
#include "epd/transport/channel_hub.hpp"

namespace epd::bench {

namespace {
// CAF keeps a reference to its config for the system's lifetime.
caf::actor_system_config& sim_config() {
  static caf::actor_system_config cfg = [] {
    caf::actor_system_config c;
    c.set("scheduler.max-threads", 2);
    // As a role process runs (run_role.cpp): work-stealing's idle workers poll, 14-18 % of a worker's CPU
    // in perf at 1,000 instances, a cost no real instance has.
    c.set("scheduler.policy", caf::atom("sharing"));
    return c;
  }();
  return cfg;
}
}  // namespace

Simulation::Simulation(const MembershipOptions& opt, MemberSide& side)
    : opt_(opt), side_(side), system_(std::make_unique<caf::actor_system>(sim_config())) {
  if (opt_.shared_threads) {
    auto hub = transport::ChannelHub::start();
    if (hub) hub_ = std::move(*hub);
  }
}

Simulation::~Simulation() {
  // In parallel: an etcd member's threads notice a stop only every 50-100 ms, so one at a time would take
  // tens of seconds for a few hundred.
  std::vector<Member*> all;
  for (auto& [_, m] : live_) all.push_back(&m);
  const size_t workers = std::min<size_t>(32, all.size());
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      for (size_t i = w; i < all.size(); i += workers) {
        all[i]->link->crash();
        all[i]->bridge->stop();
      }
    });
  for (auto& t : threads) t.join();
  live_.clear();
}

std::optional<uint64_t> Simulation::add(const std::string& id, const std::string& role, bool router) {
  // A router reads its sockets as a real one does (its channel's own thread, woken per ready socket): on a
  // hub a channel reads every socket at each wake-up, fine for an instance's handful, O(N) for a router's.
  actors::LivenessConfig liveness{opt_.interval, opt_.misses, router, side_.router_endpoints()};
  auto bridge = actors::Bridge::start(id, actors::fresh_incarnation(), "tcp://127.0.0.1:*", {},
                                      std::move(liveness), {}, router ? nullptr : hub_);
  if (!bridge) {
    std::fprintf(stderr, "membership bench: %s: %s\n", id.c_str(), bridge.error().to_string().c_str());
    return std::nullopt;
  }
  Member m{bridge.value(), nullptr, router ? std::make_shared<actors::RegistryView>() : nullptr, 0};
  m.link = side_.join(*system_, m.bridge, role, m.view);
  if (!m.link) {
    m.bridge->stop();
    return std::nullopt;
  }
  m.bridge->wired();
  if (router) routers_.push_back(id);
  const uint64_t incarnation = m.bridge->incarnation();
  m.reported = incarnation;
  live_[id] = std::move(m);
  changed();
  return incarnation;
}

void Simulation::kill(const std::string& id) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  retire(it->second);
  live_.erase(it);
  std::erase(routers_, id);
  changed();
}

void Simulation::retire(Member& m) {
  // The actor first (nothing may send through a stopped bridge), then the sockets. An etcd member's
  // threads stop within 100 ms and do not revoke its lease.
  m.link->crash();
  m.bridge->stop();
  auto s = m.bridge->stats();
  retired_.bytes_in += s.bytes_received;
  retired_.bytes_out += s.bytes_sent;
  retired_.frames_out += s.sent;
}

void Simulation::changed() {
  agreed_up_to_.reset();
  all_agreed_ = false;
}

std::vector<std::pair<std::string, uint64_t>> Simulation::rejoined() {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (auto& [id, m] : live_)
    if (const uint64_t now = m.bridge->incarnation(); now != m.reported) {
      m.reported = now;
      out.emplace_back(id, now);
    }
  return out;
}

void Simulation::expect(const std::string& id, uint64_t incarnation) {
  expected_[id] = incarnation;
  changed();
}

void Simulation::forget(const std::string& id) {
  expected_.erase(id);
  changed();
}

std::optional<std::string> Simulation::disagreeing() {
  if (all_agreed_) return std::nullopt;
  auto it = agreed_up_to_ ? live_.lower_bound(*agreed_up_to_) : live_.begin();
  while (it != live_.end() && it->second.bridge->peers().lists_exactly(expected_)) ++it;
  if (it == live_.end()) {
    all_agreed_ = true;
    return std::nullopt;
  }
  agreed_up_to_ = it->first;
  return it->first;
}

std::string Simulation::describe(const std::string& id) const {
  auto it = live_.find(id);
  if (it == live_.end()) return id + " (not here)";
  const auto& peers = it->second.bridge->peers();
  const auto listed = peers.incarnations();
  // The first difference says why: a peer missing, one too many, or one at another incarnation (a rejoin
  // that the coordinator has not yet passed on, or a directory that holds an old one).
  std::string first;
  for (const auto& [peer, incarnation] : expected_) {
    auto l = listed.find(peer);
    if (l == listed.end())
      first = peer + " missing";
    else if (l->second != incarnation)
      first =
          peer + " at incarnation " + std::to_string(l->second) + ", expected " + std::to_string(incarnation);
    if (!first.empty()) break;
  }
  if (first.empty())
    for (const auto& [peer, _] : listed)
      if (!expected_.count(peer)) {
        first = peer + " listed but not live";
        break;
      }
  return id + " lists " + std::to_string(listed.size()) + " instances at version " +
         std::to_string(peers.version()) + (first.empty() ? "" : " (first difference: " + first + ")");
}

namespace {
bool placeable_by(const actors::RegistryView& view, actors::Bridge& bridge, const std::string& id) {
  auto listed = bridge.peers().find(id);
  if (!listed || !bridge.peers().alive(id)) return false;
  auto e = view.find(id);
  return e && e->load.healthy && e->info.incarnation == listed->incarnation;
}
}  // namespace

bool Simulation::routed_around(const std::string& id) const {
  for (const auto& r : routers_) {
    const auto& m = live_.at(r);
    if (placeable_by(*m.view, *m.bridge, id)) return false;
  }
  return true;
}

bool Simulation::unlisted_by_routers(const std::string& id) const {
  for (const auto& r : routers_)
    if (live_.at(r).bridge->peers().find(id)) return false;
  return true;
}

bool Simulation::placeable_everywhere(const std::string& id) const {
  for (const auto& r : routers_) {
    const auto& m = live_.at(r);
    if (!placeable_by(*m.view, *m.bridge, id)) return false;
  }
  return true;
}

bool Simulation::all_placeable_everywhere() const {
  for (const auto& [id, _] : expected_)
    if (!placeable_everywhere(id)) return false;
  return true;
}

Simulation::Traffic Simulation::traffic() const {
  Traffic t = retired_;
  for (const auto& [_, m] : live_) {
    auto s = m.bridge->stats();
    t.bytes_in += s.bytes_received;
    t.bytes_out += s.bytes_sent;
    t.frames_out += s.sent;
  }
  return t;
}

}  // namespace epd::bench
