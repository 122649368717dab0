#include "epd/actors/cache/prefix_cache.hpp"

#include <algorithm>
#include <string>

namespace epd::actors {

protocol::Result<uint32_t> prefix_cache_budget(uint32_t setting, uint32_t kv_pages, std::string_view role) {
  if (setting == kPrefixCacheDefault) return kv_pages / 2;
  if (setting > kv_pages)
    return protocol::make_error(protocol::ErrorCode::config_error,
                                std::string(role) + ": prefix_cache_pages (" + std::to_string(setting) +
                                    ") is more than kv_pages (" + std::to_string(kv_pages) + ")");
  return setting;
}

std::vector<PageKey> page_keys(std::span<const uint32_t> prompt, uint32_t page_size,
                               std::optional<uint32_t> image_token, const std::optional<ContentHash>& images,
                               bool tail) {
  std::vector<PageKey> keys;
  if (page_size == 0) return keys;
  uint32_t row = 0;  // the next image token's row in the request's embeddings
  const size_t end = tail ? prompt.size() : prompt.size() - prompt.size() % page_size;
  for (size_t begin = 0; begin < end; begin += page_size) {
    PageKey key;
    key.tokens.assign(prompt.begin() + begin, prompt.begin() + std::min(end, begin + page_size));
    key.partial = key.tokens.size() < page_size;
    if (image_token) {
      for (uint32_t t : key.tokens)
        if (t == *image_token) key.rows.push_back(row++);
    }
    if (!key.rows.empty()) {
      if (!images) break;  // an image nobody can name: this page and all after it are not cached
      key.images = *images;
    }
    keys.push_back(std::move(key));
  }
  return keys;
}

uint32_t shared_tokens(const PageKey& a, const PageKey& b, std::optional<uint32_t> image_token) {
  const size_t n = std::min(a.tokens.size(), b.tokens.size());
  size_t row = 0;  // index into both keys' rows (equal tokens so far: equal image tokens)
  for (size_t i = 0; i < n; ++i) {
    if (a.tokens[i] != b.tokens[i]) return uint32_t(i);
    if (image_token && a.tokens[i] == *image_token) {
      if (a.images != b.images || row >= a.rows.size() || row >= b.rows.size() || a.rows[row] != b.rows[row])
        return uint32_t(i);
      ++row;
    }
  }
  return uint32_t(n);
}

std::vector<uint32_t> PrefixCache::Lease::pages() const {
  std::vector<uint32_t> out;
  out.reserve(nodes_.size());
  for (const Node* n : nodes_) out.push_back(n->page);
  return out;
}

PrefixCache::PrefixCache(uint32_t budget_pages, std::shared_ptr<PrefixCacheStats> stats)
    : budget_(budget_pages), stats_(std::move(stats)) {
  stats_->budget_pages = budget_;
  publish();
}

void PrefixCache::update_victim(Node* n) {
  if (n == &root_) return;
  const bool evictable = n->refs == 0 && n->children.empty();
  if (evictable)
    victims_.insert({n->used, n});
  else
    victims_.erase({n->used, n});
}

void PrefixCache::touch(Node* n) {
  victims_.erase({n->used, n});
  n->used = ++tick_;
  update_victim(n);
}

void PrefixCache::ref(Node* n) {
  if (n->refs++ == 0) --unreferenced_;
  update_victim(n);
}

void PrefixCache::unref(Node* n) {
  if (--n->refs == 0) ++unreferenced_;
  update_victim(n);
}

PrefixCache::Lease PrefixCache::acquire(std::span<const PageKey> keys, uint32_t max_pages,
                                        uint64_t prompt_tokens, uint32_t step,
                                        const std::function<bool(uint64_t)>& starts_at) {
  Lease lease;
  if (!enabled()) return lease;
  Node* at = &root_;
  for (size_t i = 0; i < keys.size() && i < max_pages && !keys[i].partial; ++i) {
    auto found = at->children.find(keys[i]);
    if (found == at->children.end()) break;
    at = found->second.get();
    lease.nodes_.push_back(at);
  }
  size_t n = step == 0 ? 0 : lease.nodes_.size() / step * step;
  const auto tokens = [&](size_t pages) {
    uint64_t t = 0;
    for (size_t i = 0; i < pages; ++i) t += keys[i].tokens.size();
    return t;
  };
  while (n > 0 && starts_at && !starts_at(tokens(n))) n -= step;
  lease.nodes_.resize(n);
  // Touched leaf first, so a deeper page is never older than its parent: eviction takes leaves anyway,
  // and the order keeps a shared prefix warmer than any one continuation of it.
  for (auto it = lease.nodes_.rbegin(); it != lease.nodes_.rend(); ++it) {
    ref(*it);
    touch(*it);
  }
  uint64_t hit = 0;
  for (size_t i = 0; i < lease.nodes_.size(); ++i) hit += keys[i].tokens.size();
  stats_->hit_tokens += hit;
  stats_->missed_tokens += prompt_tokens > hit ? prompt_tokens - hit : 0;
  return lease;
}

void PrefixCache::adopt(Lease& lease, std::span<const PageKey> keys, std::span<const uint32_t> pages,
                        std::vector<uint32_t>& freed) {
  if (!enabled()) return;
  Node* at = lease.nodes_.empty() ? &root_ : lease.nodes_.back();
  for (size_t i = lease.nodes_.size(); i < keys.size() && i < pages.size(); ++i) {
    if (at->children.count(keys[i])) return;  // someone else's page for this key: ours stays ours
    // Room for one more page: evict an unreferenced one (never one of this lease: they are referenced).
    if (pages_ >= budget_ && !evict_one(freed)) return;
    auto node = std::make_unique<Node>();
    Node* n = node.get();
    n->parent = at;
    n->page = pages[i];
    auto [it, _] = at->children.emplace(keys[i], std::move(node));
    n->key = &it->first;
    ++pages_;
    ++unreferenced_;
    ++stats_->inserted_pages;
    update_victim(at);  // no longer a leaf
    ref(n);
    touch(n);
    lease.nodes_.push_back(n);
    at = n;
  }
  publish();
}

std::optional<PrefixCache::PartialHit> PrefixCache::partial_hit(const Lease& lease, const PageKey& next,
                                                                std::optional<uint32_t> image_token) {
  if (!enabled()) return std::nullopt;
  const Node* at = lease.nodes_.empty() ? &root_ : lease.nodes_.back();
  // Keys are ordered by their tokens first, so the one sharing the longest run with `next` sits next to
  // where `next` would go.
  Node* best = nullptr;
  uint32_t most = 0;
  auto it = at->children.lower_bound(next);
  for (auto candidate : {it, it == at->children.begin() ? at->children.end() : std::prev(it)}) {
    if (candidate == at->children.end()) continue;
    const uint32_t n = shared_tokens(candidate->first, next, image_token);
    if (n > most) most = n, best = candidate->second.get();
  }
  if (!best) return std::nullopt;
  touch(best);
  return PartialHit{best->page, most};
}

void PrefixCache::count_partial(uint32_t tokens) {
  stats_->hit_tokens += tokens;
  stats_->missed_tokens -= tokens;  // acquire counted the whole rest of the prompt as missed
}

void PrefixCache::release(Lease& lease) {
  for (Node* n : lease.nodes_) unref(n);
  lease.nodes_.clear();
}

bool PrefixCache::evict_one(std::vector<uint32_t>& out) {
  if (victims_.empty()) return false;
  Node* n = victims_.begin()->second;
  victims_.erase(victims_.begin());
  out.push_back(n->page);
  Node* parent = n->parent;
  parent->children.erase(*n->key);  // destroys n
  --pages_;
  --unreferenced_;
  ++stats_->evicted_pages;
  update_victim(parent);  // may be a leaf now
  return true;
}

std::vector<uint32_t> PrefixCache::evict(uint32_t n) {
  std::vector<uint32_t> out;
  while (out.size() < n && evict_one(out)) {
  }
  publish();
  return out;
}

void PrefixCache::publish() {
  stats_->pages = pages_;
}

}  // namespace epd::actors
