#pragma once
// What this process knows about the other instances: the registry's last full PEERS list with the deltas
// since applied in order. Thread-safe, because
// the bridge's I/O thread resolves endpoints while actors update and read it.
#include <cstdint>
#include <map>
#include <memory>
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
    std::string role{};            // as listed (before it went, for one that is gone): metrics and logs
  };

  // Replaces the whole view with a full PEERS list; returns what changed (joined, left, restarted).
  // Older versions than the current one are ignored.
  std::vector<Change> replace(uint64_t version, const std::vector<protocol::PeerInfo>& peers);
  struct DeltaResult {
    bool gap = false;  // `version` is not the next one: nothing applied, the full list is needed
    std::vector<Change> changes;
  };
  // Applies a PEERS delta (members that joined or restarted, ids that left) on top of version - 1. A delta
  // at or below the current version is stale and ignored; one beyond the next is a gap.
  DeltaResult apply_delta(uint64_t version, const std::vector<protocol::PeerInfo>& upserts,
                          const std::vector<std::string>& left);
  // Forgets every peer (and every dead mark and PEERS version): this instance rejoins as a new incarnation
  // and takes the registry's next PEERS, whatever its version, as the whole truth. Returns one "gone" change
  // per peer that was listed.
  std::vector<Change> forget_all();
  // Adds or updates one entry (e.g. the registry's own instance, known from config before any PEERS).
  void upsert(const protocol::PeerInfo& peer);

  std::optional<protocol::PeerInfo> find(const std::string& id) const;
  // Lists `peer` exactly as given (every field): a record seen again changes nothing. No copy.
  bool lists(const protocol::PeerInfo& peer) const;
  // Every listed peer, in id order.
  std::vector<protocol::PeerInfo> all() const;
  std::optional<protocol::PeerInfo> find_by_endpoint(const std::string& endpoint) const;
  // A frame from `id` carried `incarnation`. If that is newer than both the listed incarnation and any
  // seen before, returns the listed one (the peer restarted before the registry told us); else nullopt.
  std::optional<uint64_t> observe(const std::string& id, uint64_t incarnation);
  // Marks `incarnation` of `id` dead (connection lost, or a newer incarnation seen). False if it is not
  // the listed incarnation or was marked already.
  bool mark_dead(const std::string& id, uint64_t incarnation);
  // Clears the dead mark of `incarnation` of `id` if that incarnation is still the listed one (the registry
  // kept it after our connection to it broke). True if it was marked.
  bool revive(const std::string& id, uint64_t incarnation);
  // Listed and not marked dead.
  bool alive(const std::string& id) const;
  // Listed at `incarnation` and not marked dead (placement: one lock, no copy).
  bool reaches(const std::string& id, uint64_t incarnation) const;
  std::optional<std::string> endpoint_of(const std::string& id) const;
  std::string role_of(const std::string& id) const;  // "unknown" when not listed (metrics labels)
  std::vector<protocol::PeerInfo> with_role(const std::string& role) const;
  uint64_t version() const;
  // Every listed peer's incarnation (epd-bench membership compares directories with it).
  std::map<std::string, uint64_t> incarnations() const;
  // Lists exactly these peers at these incarnations (no copy: epd-bench membership asks thousands of
  // directories every millisecond).
  bool lists_exactly(const std::map<std::string, uint64_t>& expected) const;

 private:
  // What most peers of a fleet share, held once per distinct value (interned): a build's identity and a
  // role's KV layout.
  struct Common {
    std::optional<protocol::KvLayout> kv_layout;
    protocol::BuildIdentity identity;
    bool operator==(const Common&) const = default;
  };
  // One listed peer (its id is the key). A directory lists the whole fleet and epd-bench membership holds
  // thousands of directories in a process: a whole PeerInfo took about 0.5 KB, this about 0.2.
  struct Entry {
    std::string role;
    std::string control_endpoint;
    uint64_t incarnation = 0;
    std::shared_ptr<const protocol::SegmentDescriptor> segment;  // null: none
    std::shared_ptr<const Common> common;
  };
  static constexpr size_t max_commons = 16;  // past it a value is held per entry: a lookup stays cheap

  mutable std::mutex mu_;
  uint64_t version_ = 0;
  std::map<std::string, Entry> peers_;
  std::vector<std::shared_ptr<const Common>> commons_;  // the interned values (under mu_)
  std::map<std::string, uint64_t> dead_;                // id -> incarnation known dead (until PEERS moves on)
  std::map<std::string, uint64_t> observed_;            // id -> newest incarnation seen on a frame

  void drop_stale_dead_marks();
  Entry entry_of(const protocol::PeerInfo& peer);  // under mu_
  static protocol::PeerInfo info_of(const std::string& id, const Entry& e);
};

}  // namespace epd::actors
