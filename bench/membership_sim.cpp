#include "membership_sim.hpp"

#include <cstdio>
#include <thread>

#include "epd/actors/membership/membership.hpp"
#include "epd/transport/channel_hub.hpp"

namespace epd::bench {

namespace {
// CAF keeps a reference to its config for the system's lifetime.
caf::actor_system_config& sim_config() {
  static caf::actor_system_config cfg = [] {
    caf::actor_system_config c;
    c.set("scheduler.max-threads", 2);
    return c;
  }();
  return cfg;
}
}  // namespace

Simulation::Simulation(const MembershipOptions& opt, RegistryBackend& backend)
    : opt_(opt), backend_(backend), system_(std::make_unique<caf::actor_system>(sim_config())) {
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

bool Simulation::add(const std::string& id) {
  auto bridge = actors::Bridge::start(id, actors::fresh_incarnation(), "tcp://127.0.0.1:*", {},
                                      actors::LivenessConfig{opt_.interval, opt_.misses}, {}, hub_);
  if (!bridge) {
    std::fprintf(stderr, "membership bench: %s: %s\n", id.c_str(), bridge.error().to_string().c_str());
    return false;
  }
  static const char* const roles[3] = {"encoder", "prefill", "decode"};
  const bool router = started_ < backend_.routers();
  const std::string role = router ? "router" : roles[started_ % 3];
  ++started_;
  Member m{bridge.value(), nullptr, router ? std::make_shared<actors::RegistryView>() : nullptr};
  m.link = backend_.join(*system_, m.bridge, role, m.view);
  if (!m.link) {
    m.bridge->stop();
    return false;
  }
  m.bridge->wired();
  if (router) routers_.push_back(id);
  live_[id] = std::move(m);
  return true;
}

void Simulation::kill(const std::string& id) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  retire(it->second);
  live_.erase(it);
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

std::optional<double> Simulation::converge_ms(clock::time_point since, std::chrono::milliseconds limit,
                                              const std::function<void()>& each_poll) {
  std::map<std::string, uint64_t> expected;
  for (const auto& [id, m] : live_) expected[id] = m.bridge->incarnation();
  auto it = live_.begin();
  while (it != live_.end()) {
    if (each_poll) each_poll();
    // An instance that agreed once is not asked again: a change is one step, nothing undoes it.
    while (it != live_.end() && it->second.bridge->peers().lists_exactly(expected)) ++it;
    if (it == live_.end()) break;
    if (clock::now() - since > limit) {
      std::fprintf(stderr, "membership bench: '%s' lists %zu instances (version %llu), %zu are live\n",
                   it->first.c_str(), it->second.bridge->peers().incarnations().size(),
                   (unsigned long long)it->second.bridge->peers().version(), expected.size());
      return std::nullopt;
    }
    std::this_thread::sleep_for(poll_interval());
  }
  if (each_poll) each_poll();
  return std::chrono::duration<double, std::milli>(clock::now() - since).count();
}

namespace {
bool placeable_by(const actors::RegistryView& view, actors::Bridge& bridge, const std::string& id) {
  auto listed = bridge.peers().find(id);
  if (!listed || !bridge.peers().alive(id)) return false;
  auto e = view.find(id);
  return e && e->load.healthy && e->info.incarnation == listed->incarnation;
}
}  // namespace

std::chrono::microseconds Simulation::poll_interval() const {
  // Each round reads up to every directory: at thousands of instances a 500 us round would cost more
  // than the membership work it watches.
  return std::chrono::microseconds(std::max<int64_t>(500, int64_t(live_.size()) / 2));
}

bool Simulation::routed_around(const std::string& id) const {
  for (const auto& r : routers_) {
    auto it = live_.find(r);
    if (it != live_.end() && placeable_by(*it->second.view, *it->second.bridge, id)) return false;
  }
  return true;
}

bool Simulation::unlisted_by_routers(const std::string& id) const {
  for (const auto& r : routers_) {
    auto it = live_.find(r);
    if (it != live_.end() && it->second.bridge->peers().find(id)) return false;
  }
  return true;
}

bool Simulation::placeable_everywhere(const std::string& id) const {
  for (const auto& r : routers_) {
    auto it = live_.find(r);
    if (it != live_.end() && !placeable_by(*it->second.view, *it->second.bridge, id)) return false;
  }
  return true;
}

bool Simulation::all_placeable_everywhere() const {
  for (const auto& [id, _] : live_)
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
