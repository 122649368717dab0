#include "connection_gate.hpp"

namespace epd::transport::tcp {
namespace {
constexpr size_t kMaxLoggedSources = 256;
}

ConnectionGate::Verdict ConnectionGate::admit(const std::string& source) {
  std::lock_guard lock(mu_);
  Verdict v = Verdict::admitted;
  if (open_ >= limits_.total)
    v = Verdict::too_many_connections;
  else if (auto it = unauthenticated_.find(source);
           it != unauthenticated_.end() && it->second >= limits_.unauthenticated_per_source)
    v = Verdict::too_many_unauthenticated;
  if (v != Verdict::admitted) {
    ++refused_;
    return v;
  }
  ++open_;
  ++unauthenticated_[source];
  return v;
}

void ConnectionGate::left_unauthenticated(const std::string& source) {
  std::lock_guard lock(mu_);
  auto it = unauthenticated_.find(source);
  if (it != unauthenticated_.end() && --it->second == 0) unauthenticated_.erase(it);
}

void ConnectionGate::closed(const std::string& source, bool still_unauthenticated) {
  std::lock_guard lock(mu_);
  if (open_ > 0) --open_;
  if (!still_unauthenticated) return;
  auto it = unauthenticated_.find(source);
  if (it != unauthenticated_.end() && --it->second == 0) unauthenticated_.erase(it);
}

bool ConnectionGate::first_refusal_of(const std::string& source) {
  std::lock_guard lock(mu_);
  if (logged_.size() >= kMaxLoggedSources) return false;
  return logged_.insert(source).second;
}

uint64_t ConnectionGate::refused() const {
  std::lock_guard lock(mu_);
  return refused_;
}

size_t ConnectionGate::open() const {
  std::lock_guard lock(mu_);
  return open_;
}

}  // namespace epd::transport::tcp
