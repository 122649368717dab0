#pragma once
// What this process knows about the other instances: the registry's last PEERS list. Thread-safe, because
// the bridge's I/O thread resolves endpoints while actors update and read it.
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "epd/protocol/messages.hpp"

namespace epd::actors {

class PeerDirectory {
 public:
  struct Change {
    std::string id;
    uint64_t old_incarnation = 0;  // 0: the peer is new
    uint64_t new_incarnation = 0;  // 0: the peer is gone
  };

  // Replaces the whole view (PEERS carries full lists); returns what changed (joined, left, restarted).
  // Older versions than the current one are ignored.
  std::vector<Change> replace(uint64_t version, const std::vector<protocol::PeerInfo>& peers);
  // Adds or updates one entry (e.g. the registry's own instance, known from config before any PEERS).
  void upsert(const protocol::PeerInfo& peer);

  std::optional<protocol::PeerInfo> find(const std::string& id) const;
  std::optional<std::string> endpoint_of(const std::string& id) const;
  std::vector<protocol::PeerInfo> with_role(const std::string& role) const;
  uint64_t version() const;

 private:
  mutable std::mutex mu_;
  uint64_t version_ = 0;
  std::map<std::string, protocol::PeerInfo> peers_;
};

}  // namespace epd::actors
