#pragma once
// Turns "logical pages [first, end) of a room are ready" into transfer writes: one write per layer, K/V
// and run of pages that are contiguous on both sides (merged runs keep the op count low).
#include <cstdint>
#include <span>
#include <vector>

#include "epd/protocol/kv_layout.hpp"
#include "epd/transport/types.hpp"

namespace epd::actors {

struct KvSide {
  protocol::KvLayout layout;
  uint64_t base = 0;                // address of the KV region
  std::span<const uint32_t> pages;  // logical page -> pool page
};

// Requires src.layout.same_page_format(dst.layout) and first <= end <= both page lists' sizes.
// With the token-major order (token_head_dim), where a page's tokens lie one after another, pages can be
// written in part; with another order, or 0, whole pages are:
// - `last_tokens` (1..page_size-1): the logical page end - 1 holds only that many tokens; only they are
//   written.
// - `held_tokens` (1..page_size-1): the destination holds the first that many tokens of page `first`
//   already (decode's prefix cache); they are not written.
std::vector<transport::WriteOp> plan_kv_writes(const KvSide& src, const KvSide& dst, uint32_t first,
                                               uint32_t end, uint32_t last_tokens = 0,
                                               uint32_t held_tokens = 0);

}  // namespace epd::actors
