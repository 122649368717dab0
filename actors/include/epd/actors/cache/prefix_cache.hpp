#pragma once
// The prefix cache of prefill and decode: the KV pages of prompts computed before, in a radix tree whose
// edges are whole pages of prompt, so a prompt that starts like an earlier one computes (or is sent) only
// the rest (sglang's radix cache, vLLM's automatic prefix caching, at page granularity).
//
// A node is one full page (or, kept for partial_hit() only, the partial page that ends a sequence). Its key
// is the page's token ids and, where the prompt holds an image, which row of which images (their content
// hash, docs/architecture.md "The embedding cache") lands there: the token id of an image row says nothing
// about the picture. Keys are compared whole, never by a hash of theirs, so no crafted prompt can be handed
// another prompt's KV.
//
// Pages in the tree are read-only. A room that uses a node holds a reference (a Lease) until it is reaped;
// only an unreferenced leaf can be evicted, least recently used first, so a page is never freed or reused
// while a room or a deeper entry needs it. The cache owns no memory: the role gives it pages it computed
// (adopt) and takes back the pages evict() hands out for its allocator. Owned by one actor (not
// thread-safe); its counters are atomics a scrape reads from another thread.
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "epd/actors/cache/content_hash.hpp"
#include "epd/protocol/result.hpp"

namespace epd::actors {

// What the cache did, for the metrics (docs/metrics.md, "Prefix cache").
struct PrefixCacheStats {
  std::atomic<uint64_t> budget_pages{0};
  std::atomic<uint64_t> pages{0};          // held now
  std::atomic<uint64_t> hit_tokens{0};     // prompt tokens found (not computed again)
  std::atomic<uint64_t> missed_tokens{0};  // prompt tokens looked up and computed
  std::atomic<uint64_t> inserted_pages{0};
  std::atomic<uint64_t> evicted_pages{0};
  // Prefill: KV bytes of prompts that decode said it held already (BOOTSTRAP's held_tokens), not written.
  std::atomic<uint64_t> bytes_not_sent{0};
};

// The `prefix_cache_pages` setting of prefill and decode: kPrefixCacheDefault is half of kv_pages; more
// than kv_pages is a config_error naming both.
inline constexpr uint32_t kPrefixCacheDefault = UINT32_MAX;
protocol::Result<uint32_t> prefix_cache_budget(uint32_t setting, uint32_t kv_pages, std::string_view role);

// One page of a prompt as the tree keys it.
struct PageKey {
  std::vector<uint32_t> tokens;
  // Image rows on the page: the images' hash and, per image token of the page, its row in the request's
  // embeddings (empty when the page holds no image token).
  ContentHash images{};
  std::vector<uint32_t> rows;
  // Fewer tokens than a page (page_keys' tail): kept for partial_hit(), never leased.
  bool partial = false;
  auto operator<=>(const PageKey&) const = default;
};

// The keys of a prompt's full pages, in order, as far as they can be keyed: a page with an image token
// but no images hash (an encoder that sent none) ends the list. `image_token`: the prompt's image
// placeholder id, if the model has one. `tail`: the tokens after the last whole page are keyed too, as a
// shorter last key (a partial page).
std::vector<PageKey> page_keys(std::span<const uint32_t> prompt, uint32_t page_size,
                               std::optional<uint32_t> image_token, const std::optional<ContentHash>& images,
                               bool tail = false);

// How many leading tokens two page keys share, image rows included: a token of an image counts only where
// both name the same images and row.
uint32_t shared_tokens(const PageKey& a, const PageKey& b, std::optional<uint32_t> image_token);

class PrefixCache {
  struct Node {
    Node* parent = nullptr;
    const PageKey* key = nullptr;  // its entry in parent->children
    uint32_t page = 0;
    uint32_t refs = 0;  // rooms holding it
    uint64_t used = 0;  // tick of the last lookup or insert that went through it
    std::map<PageKey, std::unique_ptr<Node>> children;
  };

 public:
  // The pages a room holds a reference to, root first. Empty for a room that holds none.
  class Lease {
   public:
    std::vector<uint32_t> pages() const;
    size_t size() const { return nodes_.size(); }
    bool empty() const { return nodes_.empty(); }

   private:
    friend class PrefixCache;
    std::vector<Node*> nodes_;
  };

  // budget_pages 0: disabled (finds nothing, keeps nothing, counts nothing).
  PrefixCache(uint32_t budget_pages,
              std::shared_ptr<PrefixCacheStats> stats = std::make_shared<PrefixCacheStats>());
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  bool enabled() const { return budget_ > 0; }
  // The longest cached run of `keys`' whole pages, at most `max_pages` and a multiple of `step` pages (0:
  // none), with a reference to each for the room. Counts the tokens found as hits and the rest of
  // `prompt_tokens` as misses.
  // `starts_at(tokens)`, when set, must also hold of the lease's length (a prefill that cannot start at
  // every grid line: ChunkGrid::cuts_image); shorter runs of `step` pages are tried.
  Lease acquire(std::span<const PageKey> keys, uint32_t max_pages, uint64_t prompt_tokens, uint32_t step = 1,
                const std::function<bool(uint64_t)>& starts_at = {});
  // After the room computed its prompt: pages[i] holds the KV of keys[i]. Every page past the lease that
  // the tree lacks becomes the cache's (the lease grows by it: the room no longer owns it), as long as the
  // budget allows after evicting unreferenced pages; `freed` receives those evicted pages. Stops at a key
  // the tree holds under another page (another room inserted it first): that room's page stays the room's.
  // A last key shorter than a page (page_keys' tail) is kept too, as a partial page nobody leases: only
  // partial_hit() reads it.
  void adopt(Lease& lease, std::span<const PageKey> keys, std::span<const uint32_t> pages,
             std::vector<uint32_t>& freed);
  // After acquire: the cached page (whole or partial) just past the lease whose leading tokens match the
  // most of `next` (the prompt's key there; shorter than a page at the prompt's end), and how many match.
  // The page stays read-only and unreferenced: copy those tokens out before anything may evict it. KV of a
  // token depends only on the tokens up to it, so a page's first tokens serve any prompt that shares them.
  // count_partial() counts the tokens the room took from it.
  struct PartialHit {
    uint32_t page = 0;
    uint32_t tokens = 0;
  };
  std::optional<PartialHit> partial_hit(const Lease& lease, const PageKey& next,
                                        std::optional<uint32_t> image_token);
  // `tokens` that acquire() counted as missed were found after all (a partial hit).
  void count_partial(uint32_t tokens);
  // Drops the room's references (the lease is empty afterwards). Its pages stay cached.
  void release(Lease& lease);
  // Evicts up to `n` unreferenced pages, least recently used leaves first; returns them for the allocator.
  std::vector<uint32_t> evict(uint32_t n);
  // Evicts every unreferenced page (e.g. to test that nothing leaks); what is left is referenced.
  std::vector<uint32_t> clear() { return evict(pages_); }

  uint32_t pages() const { return pages_; }
  uint32_t budget() const { return budget_; }
  // Pages no room references, which evict() could free now.
  uint32_t evictable() const { return unreferenced_; }
  const std::shared_ptr<PrefixCacheStats>& stats() const { return stats_; }

 private:
  void touch(Node* n);
  void ref(Node* n);
  void unref(Node* n);
  // Keeps `victims_` in step with whether `n` may be evicted (an unreferenced leaf, not the root).
  void update_victim(Node* n);
  bool evict_one(std::vector<uint32_t>& out);
  void publish();

  uint32_t budget_;
  uint32_t pages_ = 0;
  // Nodes no room references. A lease is a path from the root, so an unreferenced node has only
  // unreferenced descendants: all of them can go, leaves first.
  uint32_t unreferenced_ = 0;
  uint64_t tick_ = 0;
  Node root_;
  std::set<std::pair<uint64_t, Node*>> victims_;  // (used, node): evictable leaves, oldest first
  std::shared_ptr<PrefixCacheStats> stats_;
};

}  // namespace epd::actors
