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
// `last_tokens` (1..page_size-1): the logical page end - 1 holds only that many tokens, and with the
// token-major order (token_head_dim), where they are the page's first bytes, only they are written; 0 or
// another order: whole pages.
std::vector<transport::WriteOp> plan_kv_writes(const KvSide& src, const KvSide& dst, uint32_t first,
                                               uint32_t end, uint32_t last_tokens = 0);

}  // namespace epd::actors
