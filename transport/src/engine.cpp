#include "epd/transport/engine.hpp"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "backend_factory.hpp"
#include "fault_counters.hpp"
#include "host_id.hpp"
#include "memfd_region.hpp"

namespace epd::transport {
namespace {

using Factory = Result<std::unique_ptr<Backend>> (*)(const BackendContext&);

Factory factory_for(BackendKind kind) {
  switch (kind) {
    case BackendKind::shm:
      return &make_shm_backend;
    case BackendKind::tcp:
      return &make_tcp_backend;
    case BackendKind::rdma:
#ifdef EPD_HAVE_RDMA
      return &make_rdma_backend;
#else
      return nullptr;
#endif
  }
  return nullptr;
}

}  // namespace

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
  token_ = detail::random_u64();

  // A backend serves and connects; start those offered plus a forced one.
  std::vector<BackendKind> kinds = config_.offer;
  if (config_.force && std::find(kinds.begin(), kinds.end(), *config_.force) == kinds.end())
    kinds.push_back(*config_.force);
  const BackendContext ctx{config_, token_, incarnation_, host_id_, fences_};
  for (BackendKind kind : kinds) {
    if (backends_.count(kind)) continue;
    Factory make = factory_for(kind);
    if (!make) {
      spdlog::warn("transport[{}]: backend {} is not built in; not offered", config_.instance_id,
                   backend_name(kind));
      continue;
    }
    auto backend = make(ctx);
    if (!backend) {
      spdlog::warn("transport[{}]: backend {} did not start ({}); not offered", config_.instance_id,
                   backend_name(kind), backend.error().to_string());
      continue;
    }
    backends_.emplace(kind, std::move(backend).value());
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
  for (auto& [kind, backend] : backends_) {
    if (auto st = backend->on_region_added(*owned); !st) {
      detail::destroy_memfd_region(*owned);
      return st.error();
    }
  }
  if (fence_unit > 0) fences_->add_region(owned->addr(), owned->length, fence_unit);
  regions_.push_back(std::move(owned));
  return *regions_.back();
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
  d.token = token_;
  std::lock_guard lock(mu_);
  for (auto& r : regions_) {
    d.regions.push_back(protocol::RegionDesc{r->id, r->name, r->addr(), r->length, r->fd, r->rkey});
  }
  for (auto& [kind, backend] : backends_) {
    if (std::find(config_.offer.begin(), config_.offer.end(), kind) != config_.offer.end())
      backend->describe(d);
  }
  return d;
}

std::vector<BackendKind> Engine::offered() const {
  std::vector<BackendKind> out;
  for (auto& [kind, backend] : backends_)
    if (std::find(config_.offer.begin(), config_.offer.end(), kind) != config_.offer.end())
      out.push_back(kind);
  return out;
}

Result<BackendKind> Engine::choose_backend(const protocol::SegmentDescriptor& peer) const {
  const auto self = descriptor();
  auto usable = [&](BackendKind kind) {
    auto it = backends_.find(kind);
    return it != backends_.end() && it->second->can_reach(self, peer);
  };
  if (config_.force) {
    if (usable(*config_.force)) return *config_.force;
    return make_error(
        ErrorCode::no_common_backend,
        "forced backend " + std::string(backend_name(*config_.force)) + " cannot reach " + peer.instance_id);
  }
  for (BackendKind kind : {BackendKind::shm, BackendKind::rdma, BackendKind::tcp})
    if (usable(kind)) return kind;
  return make_error(ErrorCode::no_common_backend, "no backend shared with " + peer.instance_id);
}

Result<SessionPtr> Engine::open_session(const protocol::SegmentDescriptor& peer) {
  auto kind = choose_backend(peer);
  if (!kind) return kind.error();
  auto link = backends_.at(*kind)->connect(peer);
  if (!link) return link.error();
  std::unique_ptr<Link> l = std::move(link).value();
  if (config_.fault.enabled) l = make_fault_link(std::move(l), config_.fault, fault_counters_);
  auto session = std::make_shared<Session>(*this, peer, *kind, std::move(l), next_batch_id_);
  std::lock_guard lock(mu_);
  std::erase_if(sessions_, [](const std::weak_ptr<Session>& w) { return w.expired(); });
  sessions_.push_back(session);
  spdlog::debug("transport[{}]: session to {} over {}", config_.instance_id, peer.instance_id,
                backend_name(*kind));
  return session;
}

bool Engine::fences_writes_from(const protocol::SegmentDescriptor& writer) const {
  const auto self = descriptor();
  for (BackendKind kind : offered()) {
    if (kind == BackendKind::tcp) continue;  // the receiver admits every frame (fence.hpp)
    if (backends_.at(kind)->can_reach(writer, self)) return false;
  }
  return true;
}

bool Engine::writer_gone(const protocol::SegmentDescriptor& writer) const {
  if (writer.host_id.empty() || writer.host_id != host_id_ || writer.pid <= 0) return false;
  return ::kill(writer.pid, 0) != 0 && errno == ESRCH;
}

FaultStats Engine::fault_stats() const {
  return fault_counters_->snapshot();
}

}  // namespace epd::transport
