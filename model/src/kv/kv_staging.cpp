#include "epd/model/kv_staging.hpp"

#include <algorithm>
#include <cstring>
#include <string>

namespace epd::model {
namespace {

using protocol::dtype_size;

protocol::Error invalid(std::string detail) {
  return protocol::make_error(protocol::ErrorCode::invalid_request, std::move(detail));
}

// A layout that came off the wire must not make offset arithmetic wrap: every factor non-zero and the
// pool's total size representable.
protocol::Status check_layout(const KvLayout& l, const char* what) {
  const std::string w(what);
  if (static_cast<uint8_t>(l.dtype) > 2 || static_cast<uint8_t>(l.order) > 1)
    return invalid(w + " KV layout has an unknown dtype or order");
  if (l.layers == 0 || l.kv_heads == 0 || l.head_dim == 0 || l.num_pages == 0)
    return invalid(w + " KV layout has a zero dimension");
  if (l.page_size == 0 || l.page_size > kMaxPageSize)
    return invalid(w + " KV page size " + std::to_string(l.page_size) + " outside 1.." +
                   std::to_string(kMaxPageSize));
  uint64_t total = dtype_size(l.dtype);
  for (uint64_t f : {uint64_t{l.layers} * 2, uint64_t{l.kv_heads}, uint64_t{l.head_dim},
                     uint64_t{l.page_size}, uint64_t{l.num_pages}})
    if (__builtin_mul_overflow(total, f, &total)) return invalid(w + " KV layout size overflows");
  return {};
}

// Every page the range [first, first+count) touches is in the page table and inside the pool.
protocol::Status check_range(const KvLayout& l, std::span<const PageId> pages, uint32_t first,
                             uint32_t count) {
  if (count == 0) return {};
  const uint64_t lo = first / l.page_size, hi = (uint64_t{first} + count - 1) / l.page_size;
  if (hi >= pages.size())
    return invalid("tokens [" + std::to_string(first) + ", " + std::to_string(uint64_t{first} + count) +
                   ") need page index " + std::to_string(hi) + ", page table has " +
                   std::to_string(pages.size()));
  for (uint64_t i = lo; i <= hi; ++i)
    if (pages[i] >= l.num_pages)
      return invalid("KV page index " + std::to_string(pages[i]) + " outside pool of " +
                     std::to_string(l.num_pages) + " pages");
  return {};
}

// Splits [first, first+count) into runs that stay inside one page: fn(page, slot, index in range, length).
template <class Fn>
void for_each_run(const KvLayout& l, std::span<const PageId> pages, uint32_t first, uint32_t count, Fn&& fn) {
  const uint64_t end = uint64_t{first} + count;
  for (uint64_t t = first; t < end;) {
    const uint32_t slot = static_cast<uint32_t>(t % l.page_size);
    const uint32_t run = static_cast<uint32_t>(std::min<uint64_t>(l.page_size - slot, end - t));
    fn(pages[t / l.page_size], slot, t - first, run);
    t += run;
  }
}

template <DType T>
float load_elem(const std::byte* p, uint64_t i) {
  if constexpr (T == DType::f32) {
    float f;
    std::memcpy(&f, p + i * 4, 4);
    return f;
  } else {
    uint16_t h;
    std::memcpy(&h, p + i * 2, 2);
    return T == DType::f16 ? f16_to_f32(h) : bf16_to_f32(h);
  }
}

template <DType T>
void store_elem(std::byte* p, uint64_t i, float f) {
  if constexpr (T == DType::f32) {
    std::memcpy(p + i * 4, &f, 4);
  } else {
    const uint16_t h = T == DType::f16 ? f32_to_f16(f) : f32_to_bf16(f);
    std::memcpy(p + i * 2, &h, 2);
  }
}

// n elements from staging dtype `From` to pool dtype `To`. Widening is exact; narrowing rounds once
// (f16<->bf16 goes through f32, which holds both exactly).
template <DType From, DType To>
void convert_vec(const std::byte* in, std::byte* out, uint64_t n) {
  if constexpr (From == To) {
    std::memcpy(out, in, n * dtype_size(To));
  } else {
    for (uint64_t i = 0; i < n; ++i) store_elem<To>(out, i, load_elem<From>(in, i));
  }
}

using ConvertFn = void (*)(const std::byte*, std::byte*, uint64_t);

template <DType From>
ConvertFn converter_to(DType to) {
  switch (to) {
    case DType::f32:
      return convert_vec<From, DType::f32>;
    case DType::f16:
      return convert_vec<From, DType::f16>;
    case DType::bf16:
      return convert_vec<From, DType::bf16>;
  }
  return nullptr;
}

ConvertFn converter(DType from, DType to) {
  switch (from) {
    case DType::f32:
      return converter_to<DType::f32>(to);
    case DType::f16:
      return converter_to<DType::f16>(to);
    case DType::bf16:
      return converter_to<DType::bf16>(to);
  }
  return nullptr;
}

}  // namespace

uint64_t staging_token_bytes(const protocol::KvLayout& src) {
  return uint64_t{src.layers} * 2 * src.kv_heads * src.head_dim * dtype_size(src.dtype);
}

protocol::Status gather_tokens(const KvPool& src, std::span<const PageId> pages, uint32_t first,
                               uint32_t count, std::byte* out) {
  const KvLayout& l = src.layout;
  if (auto st = check_layout(l, "source"); !st) return st;
  if (auto st = check_range(l, pages, first, count); !st) return st;
  if (count == 0) return {};
  if (src.base == nullptr || out == nullptr)
    return invalid("gather needs a source pool and an output buffer");

  const KvView kv(src);
  const uint64_t vec = uint64_t{l.head_dim} * dtype_size(l.dtype), row = vec * l.kv_heads;
  const uint64_t block = row * count;  // one (layer, kind) of the staging buffer
  for (uint32_t layer = 0; layer < l.layers; ++layer)
    for (uint32_t kind = 0; kind < 2; ++kind) {
      std::byte* o = out + (uint64_t{layer} * 2 + kind) * block;
      for_each_run(l, pages, first, count, [&](PageId page, uint32_t slot, uint64_t i, uint32_t run) {
        if (l.order == KvDimOrder::token_head_dim) {  // the run is contiguous in both: one copy
          std::memcpy(o + i * row, kv.raw(layer, kind, page, slot, 0), run * row);
          return;
        }
        for (uint32_t h = 0; h < l.kv_heads; ++h)
          for (uint32_t r = 0; r < run; ++r)
            std::memcpy(o + (i + r) * row + h * vec, kv.raw(layer, kind, page, slot + r, h), vec);
      });
    }
  return {};
}

protocol::Status scatter_tokens(const KvPool& dst, std::span<const PageId> pages, uint32_t first,
                                uint32_t count, const std::byte* in, const protocol::KvLayout& src_layout) {
  const KvLayout& l = dst.layout;
  if (auto st = check_layout(l, "destination"); !st) return st;
  if (static_cast<uint8_t>(src_layout.dtype) > 2) return invalid("staged KV has an unknown dtype");
  if (src_layout.layers != l.layers || src_layout.kv_heads != l.kv_heads || src_layout.head_dim != l.head_dim)
    return invalid("staged KV shape (layers/kv_heads/head_dim) differs from the destination pool");
  if (auto st = check_range(l, pages, first, count); !st) return st;
  if (count == 0) return {};
  if (dst.base == nullptr || in == nullptr)
    return invalid("scatter needs a destination pool and an input buffer");

  const KvView kv(dst);
  const ConvertFn conv = converter(src_layout.dtype, l.dtype);
  const uint64_t svec = uint64_t{l.head_dim} * dtype_size(src_layout.dtype), srow = svec * l.kv_heads;
  const uint64_t block = srow * count;
  for (uint32_t layer = 0; layer < l.layers; ++layer)
    for (uint32_t kind = 0; kind < 2; ++kind) {
      const std::byte* s = in + (uint64_t{layer} * 2 + kind) * block;
      for_each_run(l, pages, first, count, [&](PageId page, uint32_t slot, uint64_t i, uint32_t run) {
        if (l.order == KvDimOrder::token_head_dim) {  // contiguous in both: one copy/convert per run
          conv(s + i * srow, kv.raw(layer, kind, page, slot, 0), uint64_t{run} * l.kv_heads * l.head_dim);
          return;
        }
        for (uint32_t h = 0; h < l.kv_heads; ++h)
          for (uint32_t r = 0; r < run; ++r)
            conv(s + (i + r) * srow + h * svec, kv.raw(layer, kind, page, slot + r, h), l.head_dim);
      });
    }
  return {};
}

}  // namespace epd::model
