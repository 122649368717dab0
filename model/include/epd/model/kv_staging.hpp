#pragma once
// Staging between two KV layouts. Prefill and decode may page, order and type their caches differently;
// prefill gathers a token range into one contiguous buffer (in its own dtype), decode scatters it into its
// pool and converts once. The buffer format depends only on the shape and the source dtype, never on
// page size or order, so neither side needs to know the other's paging.
#include <cstddef>
#include <cstdint>
#include <span>

#include "epd/model/kv_cache.hpp"
#include "epd/protocol/kv_layout.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model {

// The staging format of a token range: [layer][kind K=0,V=1][token][kv_head][head_dim], elements in the
// source pool's dtype. It is what prefill writes into decode's staging ring.
uint64_t staging_token_bytes(const protocol::KvLayout& src);  // layers*2*kv_heads*head_dim*dtype_size

// Copies tokens [first, first+count) of the sequence with page table `pages` (token t lives in
// pages[t / page_size], slot t % page_size) into `out` (count * staging_token_bytes bytes). Byte copy, no
// conversion.
protocol::Status gather_tokens(const KvPool& src, std::span<const PageId> pages, uint32_t first,
                               uint32_t count, std::byte* out);

// Writes staged tokens (produced by gather_tokens from a pool with layout `src_layout`) into `dst`, whose
// page size, order and dtype may all differ; converts the element type (f32->f16/bf16 round to nearest even,
// f16/bf16->f32 exact, f16<->bf16 via f32, same dtype = byte copy).
protocol::Status scatter_tokens(const KvPool& dst, std::span<const PageId> pages, uint32_t first,
                                uint32_t count, const std::byte* in, const protocol::KvLayout& src_layout);

}  // namespace epd::model
