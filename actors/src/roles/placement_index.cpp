#include "roles/placement_index.hpp"

#include <algorithm>
#include <optional>
#include <vector>

namespace epd::actors {

// Scores instances one at a time for one request and keeps the best (the header's score). With `reaches`
// it skips instances this process does not reach; without, it skips only `excluded` (pick() checks the
// winner alone, and runs again without it if it is not reached: rare, and cheaper than a check each).
class PlacementIndex::Scorer {
 public:
  Scorer(const std::string& role, const Failures& failures, const PlacementWork* work,
         const PrefixIndex& prefix, const Reaches* reaches, const std::vector<const Entry*>& excluded)
      : role_(role),
        failures_(failures),
        work_(work && prefix.enabled() ? work : nullptr),
        prefix_(prefix),
        reaches_(reaches),
        excluded_(excluded) {}

  bool aware() const { return work_ != nullptr; }
  size_t scored() const { return seen_.size(); }

  // `held`: how many of the prompt's blocks it holds, when the caller knows.
  void consider(const Entry& e, std::optional<uint32_t> held = std::nullopt) {
    const Record& r = e.second;
    if (!r.eligible || r.role != role_ || listed(seen_, &e) || listed(excluded_, &e)) return;
    seen_.push_back(&e);
    if (reaches_ && !(*reaches_)(e.first, r.incarnation)) return;
    uint32_t matched = 0;
    uint64_t cost = 0;
    if (work_) {
      matched = (held ? *held : prefix_.matched(e.first, work_->blocks)) * prefix_.block_tokens();
      cost = work_->tokens - std::min<uint64_t>(work_->tokens, matched) + r.work;
    }
    const Score s{failures_of(e.first), cost, {r.rooms, -int64_t(r.free_pages), &e}};
    if (!best_ || s < best_->score) best_ = Best{s, matched};
  }

  // No instance not yet scored can win if each costs at least `cost` and, at exactly that cost, loses the
  // tie-break to `tie` or later (none: to anything).
  bool settled(uint64_t cost, const TieBreak* tie = nullptr) const {
    if (!best_ || best_->score.failures > 0) return false;
    if (best_->score.cost != cost) return best_->score.cost < cost;
    return tie && best_->score.rest < *tie;
  }
  bool found_unfailed() const { return best_ && best_->score.failures == 0; }

  const Entry* best() const { return best_ ? best_->score.rest.entry : nullptr; }
  std::optional<Placement> result() const {
    if (!best_) return std::nullopt;
    const Entry& e = *best_->score.rest.entry;
    return Placement{e.first, e.second.incarnation, best_->matched};
  }

 private:
  struct Score {
    uint32_t failures;
    uint64_t cost;
    TieBreak rest;
    bool operator<(const Score& o) const {
      return std::tie(failures, cost, rest) < std::tie(o.failures, o.cost, o.rest);
    }
  };
  struct Best {
    Score score;
    uint32_t matched;
  };

  // Linear: a pick scores a few instances (at most about kMaxScored plus one block's holders).
  static bool listed(const std::vector<const Entry*>& v, const Entry* e) {
    return std::find(v.begin(), v.end(), e) != v.end();
  }
  uint32_t failures_of(const std::string& id) const {
    auto f = failures_.find(id);
    return f == failures_.end() ? 0 : f->second;
  }

  const std::string& role_;
  const Failures& failures_;
  const PlacementWork* work_;
  const PrefixIndex& prefix_;
  const Reaches* reaches_;
  const std::vector<const Entry*>& excluded_;
  std::vector<const Entry*> seen_;
  std::optional<Best> best_;
};

template <class F>
void PlacementIndex::modify(const std::string& id, F&& change) {
  auto [it, added] = records_.try_emplace(id);
  Record& r = it->second;
  const TieBreak old_tie{r.rooms, -int64_t(r.free_pages), &*it};
  if (!added && r.eligible) {
    auto& sets = roles_[r.role];
    sets.by_rooms.erase(old_tie);
    sets.by_work.erase({r.work, old_tie});
  }
  const bool had_rooms = r.rooms > 0;
  change(r);
  with_rooms_ = with_rooms_ + (r.rooms > 0) - had_rooms;
  if (r.eligible) {
    const TieBreak tie{r.rooms, -int64_t(r.free_pages), &*it};
    auto& sets = roles_[r.role];
    sets.by_rooms.insert(tie);
    sets.by_work.insert({r.work, tie});
  } else if (!r.listed && r.rooms == 0 && r.work == 0) {
    records_.erase(it);  // gone, and nothing of ours runs there
  }
}

void PlacementIndex::update(const RegistryEntry& e) {
  const bool eligible = e.load.healthy && !e.load.draining;
  if (auto it = records_.find(e.info.instance_id); it != records_.end()) {
    const Record& r = it->second;
    if (r.listed && r.role == e.info.role && r.incarnation == e.info.incarnation && r.eligible == eligible &&
        r.free_pages == e.load.free_kv_pages)
      return;  // a heartbeat that changes nothing placement weighs
  }
  modify(e.info.instance_id, [&](Record& r) {
    r.role = e.info.role;
    r.incarnation = e.info.incarnation;
    r.listed = true;
    r.eligible = eligible;
    r.free_pages = e.load.free_kv_pages;
  });
}

void PlacementIndex::erase(const std::string& id) {
  if (!records_.count(id)) return;
  modify(id, [](Record& r) { r.listed = r.eligible = false; });
}

void PlacementIndex::add_room(const std::string& id) {
  modify(id, [](Record& r) { ++r.rooms; });
}

void PlacementIndex::remove_room(const std::string& id) {
  auto it = records_.find(id);
  if (it == records_.end() || it->second.rooms == 0) return;
  modify(id, [](Record& r) { --r.rooms; });
}

void PlacementIndex::charge(const std::string& id, uint64_t tokens) {
  if (tokens > 0) modify(id, [&](Record& r) { r.work += tokens; });
}

void PlacementIndex::discharge(const std::string& id, uint64_t& tokens) {
  const uint64_t t = std::exchange(tokens, 0);
  if (t == 0 || !records_.count(id)) return;
  modify(id, [&](Record& r) { r.work -= std::min(r.work, t); });
}

std::optional<Placement> PlacementIndex::pick_by_scan(const std::string& role, const Failures& failures,
                                                      const PlacementWork* work, const PrefixIndex& prefix,
                                                      const Reaches& reaches) const {
  const std::vector<const Entry*> none;
  Scorer scorer(role, failures, work, prefix, &reaches, none);
  for (const Entry& e : records_) scorer.consider(e);
  return scorer.result();
}

// Without cache-awareness the score is (failures, rooms, free pages, id): by_rooms is that order among
// instances this request never failed on, so the first of those it reaches wins, after at most as many
// steps as it has failures and unreachable instances.
//
// Cache-aware, an instance's cost is the request's tokens minus its matched tokens plus its work:
//  1. From the deepest block anyone holds towards the first, the holders of each block are scored (once per
//     run of blocks with the same holders). Once the holders of block d are scored, every instance not
//     scored holds at most d blocks, so none costs less than the tokens minus d blocks plus the least work
//     of any instance: with the best below that, the pick ends. A block held by more than kMaxScored
//     instances (a shared system prompt) is left to step 2.
//  2. The rest in order of work: each costs at least its work plus the tokens minus the blocks an unscored
//     instance may hold, so the walk ends at the first that cannot beat the best.
// The pick is exact unless step 2 scores kMaxScored instances without settling; then the best of those
// wins (each of them is among the least loaded).
std::optional<Placement> PlacementIndex::pick(const std::string& role, const Failures& failures,
                                              const PlacementWork* work, const PrefixIndex& prefix,
                                              const Reaches& reaches, size_t* scored) const {
  auto sets = roles_.find(role);
  if (sets == roles_.end() || sets->second.by_rooms.empty()) return std::nullopt;
  std::vector<const Entry*> unreachable;
  if (scored) *scored = 0;
  for (;;) {
    Scorer scorer(role, failures, work, prefix, nullptr, unreachable);
    if (scorer.aware())
      aware_pick(sets->second, *work, prefix, scorer);
    else
      for (const TieBreak& k : sets->second.by_rooms) {
        scorer.consider(*k.entry);
        if (scorer.found_unfailed()) break;
      }
    if (scored) *scored += scorer.scored();
    const Entry* best = scorer.best();
    if (!best || reaches(best->first, best->second.incarnation)) return scorer.result();
    unreachable.push_back(best);
  }
}

void PlacementIndex::aware_pick(const Roles& sets, const PlacementWork& work, const PrefixIndex& prefix,
                                Scorer& scorer) const {
  const uint64_t tokens = work.tokens;
  const uint64_t block = prefix.block_tokens();
  auto cost_if_holding = [&](uint64_t blocks, uint64_t w) {
    return tokens - std::min(tokens, blocks * block) + w;
  };
  const uint64_t least_work = sets.by_work.begin()->work;
  uint32_t at_most = prefix.deepest(work.blocks);  // blocks an instance not scored may hold
  while (at_most > 0 && !scorer.settled(cost_if_holding(at_most, least_work))) {
    // The holders of every deeper block are scored, so one not scored yet holds exactly at_most blocks.
    const bool few = prefix.for_each_holder(work.blocks[at_most - 1], kMaxScored, [&](const std::string& id) {
      if (auto it = records_.find(id); it != records_.end()) scorer.consider(*it, at_most);
    });
    if (!few) break;
    // Whoever is left holds fewer blocks. Skipping the shallower blocks with these same holders (a binary
    // search) pays only if the pick goes on.
    if (!scorer.settled(cost_if_holding(at_most - 1, least_work)))
      at_most = prefix.same_holders_from(work.blocks, at_most);
    --at_most;
  }
  for (const ByWork& k : sets.by_work) {
    if (scorer.settled(cost_if_holding(at_most, k.work), &k.rest)) break;
    if (scorer.scored() >= kMaxScored && scorer.found_unfailed()) break;
    scorer.consider(*k.rest.entry);
  }
}

}  // namespace epd::actors
