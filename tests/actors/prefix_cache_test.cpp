// The prefix cache: a radix tree of whole KV pages keyed by their tokens (and image rows), references held
// by rooms, least recently used unreferenced leaves evicted under a page budget.
#include <catch2/catch.hpp>
#include <map>
#include <random>
#include <set>

#include "cache/page_allocator.hpp"
#include "cache/prefix_index.hpp"
#include "epd/actors/cache/prefix_cache.hpp"

using namespace epd::actors;

namespace {

constexpr uint32_t kPage = 4;

std::vector<uint32_t> prompt_of(std::initializer_list<uint32_t> pages_first_tokens, uint32_t extra = 1) {
  std::vector<uint32_t> p;
  for (uint32_t t : pages_first_tokens)
    for (uint32_t k = 0; k < kPage; ++k) p.push_back(t * 100 + k);
  for (uint32_t k = 0; k < extra; ++k) p.push_back(9000 + k);
  return p;
}

// A room as the prefill role runs one: look up, take pages for the rest, compute, offer the pages.
struct Room {
  PrefixCache::Lease lease;
  std::vector<uint32_t> pages;  // logical order: the lease's, then its own
};

Room run_room(PrefixCache& cache, PageAllocator& alloc, const std::vector<uint32_t>& prompt) {
  Room r;
  auto keys = page_keys(prompt, kPage, std::nullopt, std::nullopt);
  const uint32_t need = uint32_t((prompt.size() + kPage - 1) / kPage);
  r.lease = cache.acquire(keys, uint32_t((prompt.size() - 1) / kPage), prompt.size());
  r.pages = r.lease.pages();
  auto own = alloc.allocate(need - uint32_t(r.pages.size()));
  REQUIRE(own);
  r.pages.insert(r.pages.end(), own->begin(), own->end());
  std::vector<uint32_t> freed;
  cache.adopt(r.lease, keys, r.pages, freed);
  REQUIRE(alloc.free(freed));
  return r;
}

// The room is reaped: its references go, its own pages go back.
void reap(PrefixCache& cache, PageAllocator& alloc, Room& r) {
  std::vector<uint32_t> own(r.pages.begin() + long(r.lease.size()), r.pages.end());
  cache.release(r.lease);
  REQUIRE(alloc.free(own));
}

}  // namespace

TEST_CASE("prefix cache: page keys cover whole pages and name the image rows on them") {
  const uint32_t img = 7;
  std::vector<uint32_t> prompt{1, 2, img, img, img, img, 3, 4, 5};  // pages: [1 2 I I] [I I 3 4] + 5
  ContentHash h{};
  h[0] = 42;
  auto keys = page_keys(prompt, 4, img, h);
  REQUIRE(keys.size() == 2);
  CHECK(keys[0].tokens == std::vector<uint32_t>{1, 2, img, img});
  CHECK(keys[0].rows == std::vector<uint32_t>{0, 1});
  CHECK(keys[1].rows == std::vector<uint32_t>{2, 3});
  CHECK(keys[1].images == h);
  ContentHash other = h;
  other[0] = 43;
  CHECK(page_keys(prompt, 4, img, other)[0] != keys[0]);  // the same tokens, another picture
  // Without a hash for the images, only the pages before the first image row are keyed.
  std::vector<uint32_t> late{1, 2, 3, 4, img, 5, 6, 7, 8};
  CHECK(page_keys(late, 4, img, std::nullopt).size() == 1);
  // A model without an image token keys the placeholder id as text.
  CHECK(page_keys(prompt, 4, std::nullopt, std::nullopt)[0].rows.empty());
}

TEST_CASE("prefix cache: a prompt that starts like an earlier one finds its pages, and only whole pages") {
  PrefixCache cache(16);
  PageAllocator alloc(32);
  auto a = prompt_of({1, 2, 3}, 2);
  Room ra = run_room(cache, alloc, a);
  CHECK(ra.lease.size() == 3);  // the partial last page is not cached
  CHECK(cache.pages() == 3);
  CHECK(cache.stats()->hit_tokens == 0);
  CHECK(cache.stats()->missed_tokens == a.size());

  auto b = prompt_of({1, 2, 5}, 1);  // shares two pages
  auto keys = page_keys(b, kPage, std::nullopt, std::nullopt);
  auto lease = cache.acquire(keys, 100, b.size());
  REQUIRE(lease.size() == 2);
  CHECK(lease.pages() == std::vector<uint32_t>(ra.pages.begin(), ra.pages.begin() + 2));
  CHECK(cache.stats()->hit_tokens == 2 * kPage);
  // max_pages bounds the match: prefill always computes the prompt's last token itself.
  auto capped = cache.acquire(keys, 1, b.size());
  CHECK(capped.size() == 1);
  cache.release(capped);
  // A prefill that cannot start at every page boundary (inside a Gemma 3 image) takes a shorter run.
  auto at_zero_or_one = cache.acquire(keys, 100, b.size(), 1, [](uint64_t t) { return t != 2 * kPage; });
  CHECK(at_zero_or_one.size() == 1);
  cache.release(at_zero_or_one);
  auto none = cache.acquire(keys, 100, b.size(), 1, [](uint64_t t) { return t == 0; });
  CHECK(none.size() == 0);
  cache.release(lease);
  reap(cache, alloc, ra);
  CHECK(cache.pages() == 3);  // the pages outlive the room
}

TEST_CASE("prefix cache: a referenced page is never evicted, and every page comes back exactly once") {
  PrefixCache cache(16);
  PageAllocator alloc(32);
  Room ra = run_room(cache, alloc, prompt_of({1, 2, 3}));
  Room rb = run_room(cache, alloc, prompt_of({1, 2, 4}));
  CHECK(cache.pages() == 4);  // 1, 2, 3 and 4 under 2
  CHECK(cache.evictable() == 0);
  CHECK(cache.evict(100).empty());
  reap(cache, alloc, ra);
  // Only page 3 of room a is unreferenced now; pages 1 and 2 are room b's too.
  auto freed = cache.evict(100);
  REQUIRE(freed.size() == 1);
  CHECK(freed[0] == ra.pages[2]);
  REQUIRE(alloc.free(freed));
  reap(cache, alloc, rb);
  freed = cache.clear();
  CHECK(freed.size() == 3);
  REQUIRE(alloc.free(freed));
  CHECK(cache.pages() == 0);
  CHECK(alloc.free_count() == alloc.total());
  CHECK(cache.stats()->evicted_pages == 4);
}

TEST_CASE("prefix cache: the budget evicts the least recently used leaf, and a shared prefix outlives it") {
  PrefixCache cache(4);
  PageAllocator alloc(32);
  Room r1 = run_room(cache, alloc, prompt_of({1, 2}));
  reap(cache, alloc, r1);
  Room r2 = run_room(cache, alloc, prompt_of({1, 3}));
  reap(cache, alloc, r2);
  Room r3 = run_room(cache, alloc, prompt_of({1, 4}));
  reap(cache, alloc, r3);
  CHECK(cache.pages() == 4);                            // 1, 2, 3, 4
  Room r4 = run_room(cache, alloc, prompt_of({1, 5}));  // over budget: page 2 (oldest leaf) goes
  reap(cache, alloc, r4);
  CHECK(cache.pages() == 4);
  auto probe = [&](std::initializer_list<uint32_t> p) {
    auto prompt = prompt_of(p);
    auto l = cache.acquire(page_keys(prompt, kPage, std::nullopt, std::nullopt), 100, prompt.size());
    auto n = l.size();
    cache.release(l);
    return n;
  };
  CHECK(probe({1, 2}) == 1);  // evicted: only the shared first page is found
  CHECK(probe({1, 3}) == 2);
  CHECK(probe({1, 5}) == 2);
  CHECK(alloc.free_count() + cache.pages() == alloc.total());
}

TEST_CASE("prefix cache: with every page referenced it stops adopting, and the room keeps its own pages") {
  PrefixCache cache(2);
  PageAllocator alloc(32);
  Room r1 = run_room(cache, alloc, prompt_of({1, 2}));
  CHECK(cache.pages() == 2);
  Room r2 = run_room(cache, alloc, prompt_of({3, 4}));  // nothing evictable: r1 holds both
  CHECK(r2.lease.empty());
  CHECK(cache.pages() == 2);
  reap(cache, alloc, r2);
  reap(cache, alloc, r1);
  alloc.free(cache.clear());
  CHECK(alloc.free_count() == alloc.total());
}

TEST_CASE("prefix cache: two rooms computing the same prompt at once: the first page wins, no page is lost") {
  PrefixCache cache(16);
  PageAllocator alloc(32);
  auto p = prompt_of({1, 2});
  auto keys = page_keys(p, kPage, std::nullopt, std::nullopt);
  // Both look up before either computed.
  Room a, b;
  a.lease = cache.acquire(keys, 2, p.size());
  b.lease = cache.acquire(keys, 2, p.size());
  a.pages = *alloc.allocate(3);
  b.pages = *alloc.allocate(3);
  std::vector<uint32_t> freed;
  cache.adopt(a.lease, keys, a.pages, freed);
  cache.adopt(b.lease, keys, b.pages, freed);
  CHECK(freed.empty());
  CHECK(a.lease.size() == 2);
  CHECK(b.lease.empty());  // b's pages stay b's: freed at its reap
  reap(cache, alloc, a);
  reap(cache, alloc, b);
  alloc.free(cache.clear());
  CHECK(alloc.free_count() == alloc.total());
}

TEST_CASE("prefix cache: a budget of 0 turns it off") {
  PrefixCache cache(0);
  PageAllocator alloc(8);
  Room r = run_room(cache, alloc, prompt_of({1, 2}));
  CHECK(r.lease.empty());
  CHECK(cache.pages() == 0);
  CHECK(cache.stats()->missed_tokens == 0);
  reap(cache, alloc, r);
}

TEST_CASE("prefix cache: random rooms never share a page they do not agree on, and nothing leaks") {
  // Each page's "KV" is the key it was computed for; a lookup must hand out pages whose KV is the key
  // asked for, and page ownership (allocator, cache, rooms) must always partition the pool.
  std::mt19937 rng(7);
  PrefixCache cache(12);
  PageAllocator alloc(64);
  std::map<uint32_t, PageKey> kv;  // page -> the key its contents were computed for
  std::vector<Room> live;
  for (int step = 0; step < 3000; ++step) {
    const int op = int(rng() % 4);
    if (op < 2 || live.empty()) {
      std::vector<uint32_t> prompt;
      const uint32_t len = 1 + rng() % 20;
      for (uint32_t k = 0; k < len; ++k) prompt.push_back(rng() % 2);  // few tokens: many shared prefixes
      auto keys = page_keys(prompt, kPage, std::nullopt, std::nullopt);
      Room r;
      r.lease = cache.acquire(keys, uint32_t((len - 1) / kPage), len);
      r.pages = r.lease.pages();
      for (size_t i = 0; i < r.pages.size(); ++i) REQUIRE(kv.at(r.pages[i]) == keys[i]);
      const uint32_t need = (len + kPage - 1) / kPage - uint32_t(r.pages.size());
      auto own = alloc.allocate(need);
      if (!own) {  // as the role does: evict unreferenced pages, then try again
        REQUIRE(alloc.free(cache.evict(need - alloc.free_count())));
        own = alloc.allocate(need);
      }
      if (!own) {
        cache.release(r.lease);
        continue;
      }
      for (size_t i = 0; i < own->size(); ++i) {
        const size_t logical = r.pages.size() + i;
        if (logical < keys.size())
          kv[(*own)[i]] = keys[logical];
        else
          kv.erase((*own)[i]);
      }
      r.pages.insert(r.pages.end(), own->begin(), own->end());
      std::vector<uint32_t> freed;
      cache.adopt(r.lease, keys, r.pages, freed);
      REQUIRE(alloc.free(freed));
      live.push_back(std::move(r));
    } else if (op == 2) {
      const size_t i = rng() % live.size();
      reap(cache, alloc, live[i]);
      live.erase(live.begin() + long(i));
    } else {
      REQUIRE(alloc.free(cache.evict(rng() % 3)));
    }
    REQUIRE(cache.pages() <= cache.budget());
    // Pages: the allocator's free ones, the cache's, the rooms' own ones: a partition of the pool.
    uint32_t owned = 0;
    for (const auto& r : live) owned += uint32_t(r.pages.size() - r.lease.size());
    REQUIRE(alloc.free_count() + cache.pages() + owned == alloc.total());
  }
  for (auto& r : live) reap(cache, alloc, r);
  CHECK(cache.evictable() == cache.pages());
  REQUIRE(alloc.free(cache.clear()));
  CHECK(alloc.free_count() == alloc.total());
}

TEST_CASE("prefix index: the router's guess matches leading blocks per instance and forgets the oldest") {
  PrefixIndex index(4, 6);
  auto a = prompt_of({1, 2, 3});  // 3 whole blocks + 1 token
  auto b = prompt_of({1, 2, 4});
  auto blocks_a = index.blocks(a, std::nullopt, 0);
  auto blocks_b = index.blocks(b, std::nullopt, 0);
  REQUIRE(blocks_a.size() == 3);
  CHECK(blocks_a[0] == blocks_b[0]);
  CHECK(blocks_a[2] != blocks_b[2]);
  index.insert("p0", blocks_a);
  CHECK(index.matched("p0", blocks_a) == 3);
  CHECK(index.matched("p0", blocks_b) == 2);  // chained: block 3 differs, and nothing after it counts
  CHECK(index.matched("p1", blocks_a) == 0);
  // A block with an image row covers the picture: another picture, another chain from there.
  const uint32_t img = 7;
  std::vector<uint32_t> pic{1, 2, img, img, 5, 6, 7, 8, 9};
  auto one = index.blocks(pic, img, 111), other = index.blocks(pic, img, 222);
  CHECK(one[0] != other[0]);
  CHECK(one[1] != other[1]);
  // Bounded per instance: 6 blocks; the deepest blocks of the oldest prompt go first.
  index.insert("p0", blocks_b);  // 4 blocks held now
  auto c = prompt_of({9, 8, 7});
  index.insert("p0", index.blocks(c, std::nullopt, 0));
  CHECK(index.size("p0") == 6);
  CHECK(index.matched("p0", index.blocks(c, std::nullopt, 0)) == 3);
  CHECK(index.matched("p0", blocks_a) == 2);  // its third block was the oldest
  index.forget("p0");
  CHECK(index.matched("p0", blocks_b) == 0);
  PrefixIndex off(4, 0);
  CHECK(off.blocks(a, std::nullopt, 0).empty());
}

TEST_CASE(
    "prefix cache: a partial last page is keyed on request, and a page's first tokens serve a prompt "
    "that shares them") {
  const uint32_t img = 7;
  ContentHash h{}, other{};
  h[0] = 1;
  other[0] = 2;
  std::vector<uint32_t> seq{1, 2, 3, 4, 5, 6};  // [1 2 3 4] + [5 6]
  CHECK(page_keys(seq, 4, std::nullopt, std::nullopt).size() == 1);
  auto keys = page_keys(seq, 4, std::nullopt, std::nullopt, /*tail=*/true);
  REQUIRE(keys.size() == 2);
  CHECK(keys[1].tokens == std::vector<uint32_t>{5, 6});

  // shared_tokens: tokens, and an image row only where both name the same images and row.
  PageKey a{{5, img, 6, 8}, h, {0}}, b{{5, img, 6, 9}, h, {0}};
  CHECK(shared_tokens(a, b, img) == 3);
  b.images = other;
  CHECK(shared_tokens(a, b, img) == 1);
  CHECK(shared_tokens(a, b, std::nullopt) == 3);  // no image token: plain text
  CHECK(shared_tokens(a, PageKey{{5, img}, h, {0}}, img) == 2);

  PrefixCache cache(8);
  PageAllocator alloc(16);
  // An answer ended mid-page: its whole page and its partial last one are kept.
  std::vector<uint32_t> turn1{10, 11, 12, 13, 14, 15};
  auto keys1 = page_keys(turn1, 4, std::nullopt, std::nullopt, true);
  auto lease = cache.acquire(keys1, 1, turn1.size());
  CHECK(lease.empty());
  auto own = *alloc.allocate(2);
  std::vector<uint32_t> freed;
  cache.adopt(lease, keys1, own, freed);
  CHECK(cache.pages() == 2);
  cache.release(lease);

  // The next turn goes on from there: the whole page is leased, the partial one gives its 2 tokens.
  std::vector<uint32_t> turn2{10, 11, 12, 13, 14, 15, 16, 17, 18};
  auto keys2 = page_keys(turn2, 4, std::nullopt, std::nullopt, true);
  auto lease2 = cache.acquire(keys2, uint32_t(turn2.size() / 4), turn2.size());
  REQUIRE(lease2.size() == 1);
  auto hit = cache.partial_hit(lease2, keys2[1], std::nullopt);
  REQUIRE(hit);
  CHECK(hit->page == own[1]);
  CHECK(hit->tokens == 2);
  CHECK(cache.stats()->hit_tokens == 4);  // counted once the room takes them
  cache.count_partial(hit->tokens);
  CHECK(cache.stats()->hit_tokens == 4 + 2);
  CHECK(cache.stats()->missed_tokens == 6 + 3);  // turn 1 all, turn 2 the rest

  // A prompt that diverges inside the partial page gets only the tokens before.
  std::vector<uint32_t> turn3{10, 11, 12, 13, 14, 99};
  auto keys3 = page_keys(turn3, 4, std::nullopt, std::nullopt, true);
  auto lease3 = cache.acquire(keys3, 1, turn3.size());
  auto hit3 = cache.partial_hit(lease3, keys3[1], std::nullopt);
  REQUIRE(hit3);
  CHECK(hit3->tokens == 1);
  // A whole page that shares its first tokens serves them as well; nothing shared, no hit.
  std::vector<uint32_t> turn4{14, 15, 16, 17};
  auto keys4 = page_keys(turn4, 4, std::nullopt, std::nullopt, true);
  PrefixCache::Lease none;
  CHECK(!cache.partial_hit(none, keys4[0], std::nullopt));
  auto hit4 = cache.partial_hit(none, PageKey{{10, 11, 77}, {}, {}}, std::nullopt);
  REQUIRE(hit4);
  CHECK(hit4->page == own[0]);
  CHECK(hit4->tokens == 2);
  // Partial pages are never leased: a prompt equal to the partial page's tokens finds only whole pages.
  CHECK(cache.acquire(keys1, 2, turn1.size()).size() == 1);
}
