#include "epd/transport/engine.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "fault_counters.hpp"
#include "fault_link.hpp"
#include "host_id.hpp"
#include "memfd_region.hpp"

namespace epd::transport {

Engine::Engine(EngineConfig config)
    : config_(std::move(config)), fault_counters_(std::make_shared<FaultCounters>()) {}

Result<std::unique_ptr<Engine>> Engine::create(EngineConfig config) {
  std::unique_ptr<Engine> engine(new Engine(std::move(config)));
  if (auto st = engine->start(); !st) return st.error();
  return engine;
}

Status Engine::start() {
  host_id_ = config_.host_id.empty() ? detail::local_host_id() : config_.host_id;
  incarnation_ = config_.incarnation != 0 ? config_.incarnation : detail::random_u64();
  token_.store(detail::random_u64(), std::memory_order_release);

  if (auto st = check_backend_options(config_.options); !st) return st;
  for (const auto& name : config_.offer)
    if (!find_backend(name))
      return make_error(ErrorCode::config_error,
                        "unknown backend '" + name + "' (known: " + backend_names_text() + ")");
  if (config_.force && !find_backend(*config_.force))
    return make_error(ErrorCode::config_error,
                      "unknown backend '" + *config_.force + "' (known: " + backend_names_text() + ")");
  auto wanted = [&](std::string_view name) {
    return std::find(config_.offer.begin(), config_.offer.end(), name) != config_.offer.end();
  };
  // A backend serves and connects; start those offered plus a forced one, in preference order.
  std::vector<const BackendPlugin*> plugins = backend_plugins();
  std::stable_sort(plugins.begin(), plugins.end(),
                   [](const auto* a, const auto* b) { return a->preference < b->preference; });
  const BackendContext ctx{config_, token(), incarnation_, host_id_, fences_};
  for (const BackendPlugin* plugin : plugins) {
    if (!wanted(plugin->name) && config_.force != plugin->name) continue;
    if (!plugin->make) {
      spdlog::warn("transport[{}]: backend {} is not built in; not offered", config_.instance_id,
                   plugin->name);
      continue;
    }
    auto backend = plugin->make(ctx);
    if (!backend) {
      spdlog::warn("transport[{}]: backend {} did not start ({}); not offered", config_.instance_id,
                   plugin->name, backend.error().to_string());
      continue;
    }
    backends_.push_back({plugin, std::move(backend).value(), wanted(plugin->name)});
  }
  if (backends_.empty()) return make_error(ErrorCode::config_error, "no transport backend could start");
  return {};
}

Engine::~Engine() {
  std::vector<std::weak_ptr<Session>> sessions;
  {
    std::lock_guard lock(mu_);
    sessions.swap(sessions_);
  }
  for (auto& w : sessions)
    if (auto s = w.lock()) s->close();
  backends_.clear();  // joins receiver threads before the memory they write into goes away
  for (auto& r : regions_) detail::destroy_memfd_region(*r);
}

Result<Region> Engine::allocate(std::string name, uint64_t bytes, uint64_t fence_unit) {
  auto region = detail::create_memfd_region("epd:" + config_.instance_id + ":" + name, bytes);
  if (!region) return region.error();
  auto owned = std::make_unique<Region>(std::move(region).value());
  owned->name = std::move(name);
  std::lock_guard lock(mu_);
  owned->id = static_cast<uint32_t>(regions_.size());
  owned->fence_unit = fence_unit;  // rdma registers a fenced region for local access only
  for (auto& started : backends_) {
    if (auto st = started.backend->on_region_added(*owned); !st) {
      detail::destroy_memfd_region(*owned);
      return st.error();
    }
  }
  if (fence_unit > 0) fences_->add_region(owned->addr(), owned->length, fence_unit);
  regions_.push_back(std::move(owned));
  return *regions_.back();
}

uint64_t Engine::rotate_token() {
  uint64_t fresh = detail::random_u64();
  std::lock_guard lock(mu_);  // one rotation at a time; descriptor() sees the old or the new token whole
  while (fresh == 0 || fresh == token()) fresh = detail::random_u64();  // 0 means "revoked" to shm writers
  for (auto& started : backends_) started.backend->set_token(fresh);
  token_.store(fresh, std::memory_order_release);
  return fresh;
}

std::vector<Region> Engine::regions() const {
  std::lock_guard lock(mu_);
  std::vector<Region> out;
  out.reserve(regions_.size());
  for (auto& r : regions_) out.push_back(*r);
  return out;
}

const Region* Engine::find_local(uint64_t addr, uint64_t len) const {
  std::lock_guard lock(mu_);
  for (auto& r : regions_)
    if (r->contains(addr, len)) return r.get();
  return nullptr;
}

protocol::SegmentDescriptor Engine::descriptor() const {
  protocol::SegmentDescriptor d;
  d.instance_id = config_.instance_id;
  d.host_id = host_id_;
  d.incarnation = incarnation_;
  d.token = token();
  d.backends_version = protocol::kBackendInfoVersion;
  std::lock_guard lock(mu_);
  std::vector<const Region*> regions;
  for (auto& r : regions_) {
    d.regions.push_back(protocol::RegionDesc{r->id, r->name, r->addr(), r->length});
    regions.push_back(r.get());
  }
  for (auto& started : backends_)
    if (started.offered)
      d.backends[std::string(started.plugin->name)] = started.backend->connection_info(regions);
  return d;
}

std::vector<std::string> Engine::offered() const {
  std::vector<std::string> out;
  for (auto& started : backends_)
    if (started.offered) out.emplace_back(started.plugin->name);
  return out;
}

const Engine::Started* Engine::started(std::string_view name) const {
  for (auto& s : backends_)
    if (s.plugin->name == name) return &s;
  return nullptr;
}

Result<std::string> Engine::choose_backend(const protocol::SegmentDescriptor& peer) const {
  const auto self = descriptor();
  auto usable = [&](const Started& s) { return s.backend->can_reach(self, peer); };
  if (config_.force) {
    if (const Started* s = started(*config_.force); s && usable(*s)) return *config_.force;
    return make_error(ErrorCode::no_common_backend,
                      "forced backend " + *config_.force + " cannot reach " + peer.instance_id);
  }
  for (const Started& s : backends_)  // preference order
    if (usable(s)) return std::string(s.plugin->name);
  return make_error(ErrorCode::no_common_backend, "no backend shared with " + peer.instance_id);
}

Result<SessionPtr> Engine::open_session(const protocol::SegmentDescriptor& peer) {
  auto name = choose_backend(peer);
  if (!name) return name.error();
  auto link = started(*name)->backend->connect(peer);
  if (!link) return link.error();
  std::unique_ptr<Link> l = std::move(link).value();
  if (config_.fault.enabled) l = make_fault_link(std::move(l), config_.fault, fault_counters_);
  auto session = std::make_shared<Session>(*this, peer, *name, std::move(l), next_batch_id_);
  std::lock_guard lock(mu_);
  std::erase_if(sessions_, [](const std::weak_ptr<Session>& w) { return w.expired(); });
  sessions_.push_back(session);
  spdlog::debug("transport[{}]: session to {} over {}", config_.instance_id, peer.instance_id, *name);
  return session;
}

uint64_t Engine::grant_writes(uint64_t region_base, std::span<const uint64_t> units, uint64_t key) {
  std::vector<uint64_t> displaced;
  key = fences_->grant(region_base, units, key, &displaced);
  for (uint64_t old : displaced)  // rdma registrations of the old key may cover the units taken from it
    for (auto& s : backends_) s.backend->revoke_grant(old);
  return key;
}

bool Engine::revoke_writes(uint64_t key) {
  const bool idle = fences_->revoke(key);
  for (auto& s : backends_) s.backend->revoke_grant(key);
  return idle;
}

bool Engine::fences_writes_from(const protocol::SegmentDescriptor& writer) const {
  const auto self = descriptor();
  for (const Started& s : backends_) {
    // tcp's receiver admits every write; rdma's writer reaches fenced memory only through a grant's keys.
    if (!s.offered || s.plugin->caps.fences_writes || s.plugin->caps.fences_grants) continue;
    if (s.backend->can_reach(writer, self)) return false;
  }
  return true;
}

bool Engine::writer_gone(const protocol::SegmentDescriptor& writer) const {
  if (writer.host_id.empty() || writer.host_id != host_id_) return false;
  for (const BackendPlugin* p : backend_plugins())
    if (p->peer_gone && p->peer_gone(writer)) return true;
  return false;
}

FaultStats Engine::fault_stats() const {
  return fault_counters_->snapshot();
}

}  // namespace epd::transport
