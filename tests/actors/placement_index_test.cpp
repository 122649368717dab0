// The router's placement index: its incremental pick must choose what scoring every instance chooses.
#include <catch2/catch.hpp>
#include <random>
#include <set>

#include "cache/prefix_index.hpp"
#include "epd/actors/membership/registry_view.hpp"
#include "roles/placement_index.hpp"

using namespace epd::actors;

namespace placement_test {

constexpr uint32_t kBlock = 4;

RegistryEntry entry(const std::string& id, const std::string& role, uint32_t free_pages, bool healthy = true,
                    bool draining = false, uint64_t incarnation = 1) {
  RegistryEntry e;
  e.info.instance_id = id;
  e.info.role = role;
  e.info.incarnation = incarnation;
  e.load.healthy = healthy;
  e.load.draining = draining;
  e.load.free_kv_pages = free_pages;
  return e;
}

// A prompt of `blocks` whole blocks: a shared system prompt of 2 blocks, then the conversation's own.
std::vector<uint32_t> conversation(uint32_t id, uint32_t blocks) {
  std::vector<uint32_t> p;
  for (uint32_t b = 0; b < blocks; ++b)
    for (uint32_t k = 0; k < kBlock; ++k) p.push_back(b < 2 ? 1 + k : id * 1000 + b * 10 + k);
  p.push_back(7);  // a partial block: not indexed
  return p;
}

const PlacementIndex::Reaches kAll = [](const std::string&, uint64_t) { return true; };

}  // namespace placement_test

using namespace placement_test;

TEST_CASE("placement index: without cache-awareness fewest rooms, then most free pages, then id win") {
  PlacementIndex index;
  PrefixIndex prefix(kBlock, 64);
  index.update(entry("d1", "decode", 10));
  index.update(entry("d2", "decode", 20));
  index.update(entry("p1", "prefill", 5));
  PlacementIndex::Failures none;
  CHECK(index.pick("decode", none, nullptr, prefix, kAll)->id == "d2");  // more free pages
  index.add_room("d2");
  CHECK(index.pick("decode", none, nullptr, prefix, kAll)->id == "d1");  // fewer rooms
  CHECK(index.pick("prefill", none, nullptr, prefix, kAll)->id == "p1");
  CHECK_FALSE(index.pick("encoder", none, nullptr, prefix, kAll));
  // A failure of this request outweighs load; an instance it does not reach is skipped.
  CHECK(index.pick("decode", {{"d1", 1}}, nullptr, prefix, kAll)->id == "d2");
  auto not_d2 = [](const std::string& id, uint64_t) { return id != "d2"; };
  CHECK(index.pick("decode", {{"d1", 1}}, nullptr, prefix, not_d2)->id == "d1");
  // Unhealthy or draining instances are not placed on; their records come back with their health.
  index.update(entry("d1", "decode", 10, /*healthy=*/false));
  index.update(entry("d2", "decode", 20, true, /*draining=*/true));
  CHECK_FALSE(index.pick("decode", none, nullptr, prefix, kAll));
  index.update(entry("d1", "decode", 10));
  CHECK(index.pick("decode", none, nullptr, prefix, kAll)->id == "d1");
  // A restarted instance is placed on at its new incarnation.
  index.update(entry("d1", "decode", 10, true, false, 7));
  CHECK(index.pick("decode", none, nullptr, prefix, kAll)->incarnation == 7);
}

TEST_CASE("placement index: rooms on an instance that left are kept until they end") {
  PlacementIndex index;
  PrefixIndex prefix(kBlock, 64);
  index.update(entry("d1", "decode", 10));
  index.add_room("d1");
  index.add_room("d1");
  CHECK(index.instances_in_flight() == 1);
  index.erase("d1");
  CHECK_FALSE(index.pick("decode", {}, nullptr, prefix, kAll));
  CHECK(index.instances_in_flight() == 1);
  index.update(entry("d1", "decode", 10));  // back, with our two rooms still counted
  index.update(entry("d2", "decode", 10));
  index.remove_room("d1");
  CHECK(index.pick("decode", {}, nullptr, prefix, kAll)->id == "d2");
  index.remove_room("d1");
  index.remove_room("d1");  // one too many: ignored
  CHECK(index.instances_in_flight() == 0);
  CHECK(index.pick("decode", {}, nullptr, prefix, kAll)->id == "d1");  // ties go to the lower id
}

TEST_CASE("placement index: cache-aware, cached tokens and work are weighed in tokens") {
  PlacementIndex index;
  PrefixIndex prefix(kBlock, 64);
  for (const char* id : {"p1", "p2", "p3"}) index.update(entry(id, "prefill", 10));
  const auto prompt = conversation(1, 6);
  const auto blocks = prefix.blocks(prompt, std::nullopt, 0);
  const PlacementWork work{blocks, prompt.size()};
  prefix.insert("p2", blocks);
  auto best = index.pick("prefill", {}, &work, prefix, kAll);
  CHECK(best->id == "p2");
  CHECK(best->matched_tokens == 6 * kBlock);
  // p2's queued work outweighs its 24 cached tokens once it exceeds them.
  uint64_t charged = 24;
  index.charge("p2", charged);
  CHECK(index.pick("prefill", {}, &work, prefix, kAll)->id == "p1");  // equal cost and load: the lower id
  index.discharge("p2", charged);
  CHECK(charged == 0);
  CHECK(index.pick("prefill", {}, &work, prefix, kAll)->id == "p2");
}

TEST_CASE("placement index: the incremental pick equals scoring every instance, over random fleets") {
  std::mt19937_64 rng(42);
  auto below = [&](uint64_t n) { return uint64_t(rng() % n); };
  for (int fleet = 0; fleet < 40; ++fleet) {
    PlacementIndex index;
    PrefixIndex prefix(kBlock, 8 + below(40));
    const size_t n = 1 + below(40);  // per role: below kMaxScored, where the pick is exact
    std::vector<std::string> ids;
    for (size_t i = 0; i < n; ++i)
      for (const char* role : {"prefill", "decode"}) {
        ids.push_back(std::string(role) + std::to_string(i));
        index.update(entry(ids.back(), role, uint32_t(below(4)), below(8) != 0, below(10) == 0));
      }
    std::set<std::string> unreachable;
    for (const auto& id : ids)
      if (below(12) == 0) unreachable.insert(id);
    const PlacementIndex::Reaches reaches = [&](const std::string& id, uint64_t) {
      return !unreachable.count(id);
    };
    for (int step = 0; step < 200; ++step) {
      const auto& id = ids[below(ids.size())];
      switch (below(6)) {
        case 0: {
          uint64_t t = 1 + below(40);
          index.charge(id, t);
          break;
        }
        case 1: {
          uint64_t t = below(40);
          index.discharge(id, t);
          break;
        }
        case 2:
          index.add_room(id);
          break;
        case 3:
          index.remove_room(id);
          break;
        case 4:
          prefix.insert(
              id, prefix.blocks(conversation(uint32_t(below(6)), uint32_t(1 + below(8))), std::nullopt, 0));
          break;
        default:
          index.update(entry(id, id.rfind("prefill", 0) == 0 ? "prefill" : "decode", uint32_t(below(4)),
                             below(8) != 0, below(10) == 0));
      }
      const auto prompt = conversation(uint32_t(below(6)), uint32_t(below(9)));
      const auto blocks = prefix.blocks(prompt, std::nullopt, 0);
      const PlacementWork work{blocks, prompt.size() + below(30)};
      PlacementIndex::Failures failures;
      if (below(4) == 0) failures[ids[below(ids.size())]] = uint32_t(1 + below(2));
      for (const char* role : {"prefill", "decode"})
        for (const PlacementWork* w : {&work, static_cast<const PlacementWork*>(nullptr)}) {
          auto fast = index.pick(role, failures, w, prefix, reaches);
          auto scan = index.pick_by_scan(role, failures, w, prefix, reaches);
          INFO("fleet " << fleet << " step " << step << " role " << role << " aware " << (w != nullptr));
          REQUIRE(fast.has_value() == scan.has_value());
          if (!fast) continue;
          CHECK(fast->id == scan->id);
          CHECK(fast->matched_tokens == scan->matched_tokens);
        }
    }
  }
}

TEST_CASE("prefix index: holders of each block nest, and forgetting an instance drops it as a holder") {
  PrefixIndex prefix(kBlock, 64);
  const auto a = prefix.blocks(conversation(1, 5), std::nullopt, 0);
  const auto b = prefix.blocks(conversation(2, 4), std::nullopt, 0);
  prefix.insert("x", a);
  prefix.insert("y", a);
  prefix.insert("z", b);
  CHECK(prefix.deepest(a) == 5);
  CHECK(prefix.holder_count(a[0]) == 3);  // the shared system prompt
  CHECK(prefix.holder_count(a[2]) == 2);
  CHECK(prefix.same_holders_from(a, 5) == 3);  // blocks 2..4 are held by x and y alike
  CHECK(prefix.same_holders_from(a, 2) == 1);
  std::set<std::string> holders;
  CHECK(prefix.for_each_holder(a[4], 2, [&](const std::string& id) { holders.insert(id); }));
  CHECK(holders == std::set<std::string>{"x", "y"});
  CHECK_FALSE(prefix.for_each_holder(a[4], 1, [&](const std::string&) { FAIL("called over the limit"); }));
  prefix.forget("x");
  prefix.forget("y");
  CHECK(prefix.deepest(a) == 2);
  CHECK(prefix.holder_count(a[4]) == 0);
  prefix.insert("x", b);  // back under its old slot
  CHECK(prefix.holder_count(b[3]) == 2);
  // Eviction drops holders too: a bound of 3 blocks keeps the first 3 of the newest prompt.
  PrefixIndex small(kBlock, 3);
  small.insert("x", a);
  CHECK(small.deepest(a) == 3);
  CHECK(small.holder_count(a[3]) == 0);
}

TEST_CASE("registry view: take_changes names each changed entry once, and set() only what differs") {
  RegistryView view;
  view.upsert(entry("a", "decode", 1));
  view.upsert(entry("b", "decode", 1));
  view.update_load("a", entry("a", "decode", 2).load, {});
  std::map<std::string, bool> seen;
  auto take = [&] {
    seen.clear();
    view.take_changes([&](const std::string& id, const RegistryEntry* e) { seen[id] = e != nullptr; });
  };
  take();
  CHECK(seen == std::map<std::string, bool>{{"a", true}, {"b", true}});
  take();
  CHECK(seen.empty());
  std::map<std::string, RegistryEntry> table{{"a", entry("a", "decode", 2)}, {"c", entry("c", "decode", 1)}};
  view.set(table);  // a unchanged, b gone, c new
  take();
  CHECK(seen == std::map<std::string, bool>{{"b", false}, {"c", true}});
  view.erase("c");
  take();
  CHECK(seen == std::map<std::string, bool>{{"c", false}});
}
