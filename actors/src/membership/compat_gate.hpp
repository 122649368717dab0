#pragma once
// Where membership meets another build: the registry checks every HELLO, every instance checks the
// registry's HELLO_ACK and each peer listed in PEERS or etcd (docs/protocol.md, "Compatibility"). A refused
// peer incarnation is logged and counted once, however often it says HELLO.
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "epd/actors/process_metrics.hpp"
#include "epd/protocol/compat.hpp"

namespace epd::actors {

class CompatGate {
 public:
  CompatGate() = default;
  CompatGate(std::string self_id, protocol::BuildIdentity ours, std::shared_ptr<MembershipMetrics> metrics);

  // nullopt: `id` may work with us. Otherwise why not (the first time for this incarnation: logged, counted).
  std::optional<protocol::Incompatibility> check(const std::string& id, const std::string& role,
                                                 uint64_t incarnation, const protocol::BuildIdentity& theirs);
  const protocol::BuildIdentity& ours() const { return ours_; }

 private:
  std::string self_id_;
  protocol::BuildIdentity ours_ = protocol::current_protocol_identity();
  std::shared_ptr<MembershipMetrics> metrics_;
  std::set<std::pair<std::string, uint64_t>> refused_;  // incarnations already reported
};

}  // namespace epd::actors
