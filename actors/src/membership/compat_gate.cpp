#include "membership/compat_gate.hpp"

#include <spdlog/spdlog.h>

namespace epd::actors {

// Enough for every member of a large fleet; beyond it (a peer restarting in a loop) reports start again.
constexpr size_t kMaxRemembered = 4096;

CompatGate::CompatGate(std::string self_id, protocol::BuildIdentity ours,
                       std::shared_ptr<MembershipMetrics> metrics)
    : self_id_(std::move(self_id)), ours_(std::move(ours)), metrics_(std::move(metrics)) {}

std::optional<protocol::Incompatibility> CompatGate::check(const std::string& id, const std::string& role,
                                                           uint64_t incarnation,
                                                           const protocol::BuildIdentity& theirs) {
  auto bad = protocol::incompatibility(self_id_, ours_, id, theirs);
  if (!bad) return bad;
  if (refused_.size() >= kMaxRemembered) refused_.clear();
  if (refused_.emplace(id, incarnation).second) {
    spdlog::error("membership: refusing {} '{}' (incarnation {}): {}", role.empty() ? "peer" : role, id,
                  incarnation, bad->reason);
    if (metrics_) metrics_->refused(protocol::kind_name(bad->kind), role.empty() ? "unknown" : role);
  }
  return bad;
}

}  // namespace epd::actors
