#pragma once
// Where the router places a room's encoder, prefill and decode, kept incremental so a pick costs
// O(log N) at fleet size instead of a scan of every instance (docs/architecture.md, "Capacity").
//
// The score of an instance for a request (lower wins, compared in this order):
//   1. how often this request already failed there (a retry goes elsewhere first);
//   2. cache-aware prefill/decode only: its cost in tokens, the tokens of the request its prefix cache is
//      not believed to hold (PrefixIndex) plus the tokens of work this router placed there already
//      (Dynamo's KV-aware cost); 0 otherwise;
//   3. rooms in flight there from this router; 4. most free KV pages; 5. its id.
// pick_by_scan() computes exactly that over every instance: it is the definition. pick() finds the same
// instance from two ordered sets per role (by rooms, by work) and the prefix index's holders of the
// prompt's blocks, visiting only instances that can still win; see pick() for when it stops short.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>

#include "cache/prefix_index.hpp"
#include "epd/actors/membership/registry_view.hpp"

namespace epd::actors {

struct Placement {
  std::string id;
  uint64_t incarnation = 0;
  uint32_t matched_tokens = 0;  // of the prompt, believed cached there
};

// What a prefill or decode is asked to do, for cache-aware placement: the prompt's blocks, and the tokens
// of work the room brings beyond what is cached (prefill: the prompt; decode: prompt and answer).
struct PlacementWork {
  std::span<const uint64_t> blocks;
  uint64_t tokens = 0;
};

class PlacementIndex {
 public:
  using Failures = std::map<std::string, uint32_t>;
  // Whether this process reaches `id` at `incarnation` now (the registry view may be a PEERS ahead, and a
  // broken connection is known before the registry says so).
  using Reaches = std::function<bool(const std::string& id, uint64_t incarnation)>;
  // A cache-aware pick scores at most this many instances (see pick()).
  static constexpr size_t kMaxScored = 32;

  // The registry's entry of an instance as it is now; erase: it is no longer listed.
  void update(const RegistryEntry& entry);
  void erase(const std::string& id);

  // This router's own load on an instance: rooms in flight and tokens of work. Kept for instances that
  // left the registry until their rooms end.
  void add_room(const std::string& id);
  void remove_room(const std::string& id);
  void charge(const std::string& id, uint64_t tokens);
  // Takes back a charge (once: `tokens` is zeroed).
  void discharge(const std::string& id, uint64_t& tokens);
  size_t instances_in_flight() const { return with_rooms_; }

  // The best placeable instance of `role` by the score above; `work` with an enabled prefix index makes
  // the pick cache-aware. Placeable: listed healthy and not draining, and `reaches` it.
  // `scored`, if given, gets how many instances the pick scored (epd-bench placement).
  std::optional<Placement> pick(const std::string& role, const Failures& failures, const PlacementWork* work,
                                const PrefixIndex& prefix, const Reaches& reaches,
                                size_t* scored = nullptr) const;
  std::optional<Placement> pick_by_scan(const std::string& role, const Failures& failures,
                                        const PlacementWork* work, const PrefixIndex& prefix,
                                        const Reaches& reaches) const;

 private:
  struct Record {
    std::string role;
    uint64_t incarnation = 0;
    bool listed = false;
    bool eligible = false;  // listed, healthy, not draining
    uint32_t free_pages = 0;
    uint32_t rooms = 0;
    uint64_t work = 0;
  };
  using Records = std::unordered_map<std::string, Record>;
  using Entry = Records::value_type;
  // The score's last three terms. Keys point at their record (an unordered_map's nodes stay put).
  struct TieBreak {
    uint32_t rooms;
    int64_t neg_free;
    const Entry* entry;
    auto tie() const { return std::tie(rooms, neg_free, entry->first); }
    bool operator<(const TieBreak& o) const { return tie() < o.tie(); }
  };
  using ByRooms = TieBreak;
  struct ByWork {
    uint64_t work;
    TieBreak rest;
    bool operator<(const ByWork& o) const { return std::tie(work, rest) < std::tie(o.work, o.rest); }
  };
  struct Roles {
    std::set<ByRooms> by_rooms;
    std::set<ByWork> by_work;
  };
  class Scorer;
  void aware_pick(const Roles& sets, const PlacementWork& work, const PrefixIndex& prefix,
                  Scorer& scorer) const;

  // Every change of a record goes through here: out of the ordered sets, changed, back in (or dropped
  // when it is neither listed nor loaded).
  template <class F>
  void modify(const std::string& id, F&& change);

  Records records_;
  std::unordered_map<std::string, Roles> roles_;  // eligible instances only
  size_t with_rooms_ = 0;
};

}  // namespace epd::actors
