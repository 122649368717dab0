#pragma once
// Admission of incoming data connections to a tcp receiver. Each connection costs a thread, so who may hold
// one is bounded: a connection counts as unauthenticated until a frame of it carries the segment token, and
// one source address may hold only a few of those at a time (a writer opens one per lane; a scanner or an
// attacker opening thousands gets refused at accept). Authenticated connections are bounded only by the
// total. Thread-safe.
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>

namespace epd::transport::tcp {

class ConnectionGate {
 public:
  struct Limits {
    size_t unauthenticated_per_source = 8;
    size_t total = 1024;
  };
  explicit ConnectionGate(Limits limits) : limits_(limits) {}

  enum class Verdict { admitted, too_many_unauthenticated, too_many_connections };
  // A connection from `source` (its address, no port) arrives. Admitted ones count as unauthenticated.
  Verdict admit(const std::string& source);
  // The connection no longer counts as unauthenticated: a frame of it carried the right token, or it was
  // refused and is only closing.
  void left_unauthenticated(const std::string& source);
  // The connection ended (still_unauthenticated: left_unauthenticated was never called for it).
  void closed(const std::string& source, bool still_unauthenticated);
  // The first refusal of `source` (the caller logs it; later ones stay quiet). Bounded memory.
  bool first_refusal_of(const std::string& source);

  uint64_t refused() const;
  size_t open() const;

 private:
  const Limits limits_;
  mutable std::mutex mu_;
  std::map<std::string, size_t> unauthenticated_;  // by source; no zero entries
  size_t open_ = 0;
  uint64_t refused_ = 0;
  std::set<std::string> logged_;
};

}  // namespace epd::transport::tcp
