#include "epd/model/kv_cache.hpp"

#include <immintrin.h>
#include <xxhash.h>
#include <bit>
#include <cstring>
#include <string>

#include "kernels/half_vec.hpp"
#include "kernels/multiversion.hpp"

namespace epd::model {

KvLayout kv_layout_for(const ModelConfig& cfg, uint32_t num_pages, DType dtype, KvDimOrder order,
                       uint32_t page_size) {
  KvLayout l;
  l.layers = cfg.layers;
  l.kv_heads = cfg.kv_heads;
  l.head_dim = cfg.head_dim;
  l.page_size = page_size == 0 ? cfg.page_size : page_size;
  l.num_pages = num_pages;
  l.dtype = dtype;
  l.order = order;
  return l;
}

protocol::Status check_pool(const ModelConfig& cfg, const KvPool& pool) {
  const KvLayout& l = pool.layout;
  if (l.layers != cfg.layers || l.kv_heads != cfg.kv_heads || l.head_dim != cfg.head_dim)
    return protocol::make_error(protocol::ErrorCode::invalid_request,
                                "KV layout does not match the model (layers/kv_heads/head_dim)");
  if (l.page_size == 0 || l.page_size > kMaxPageSize)
    return protocol::make_error(
        protocol::ErrorCode::invalid_request,
        "KV page size " + std::to_string(l.page_size) + " outside 1.." + std::to_string(kMaxPageSize));
  if (static_cast<uint8_t>(l.dtype) > 2 || static_cast<uint8_t>(l.order) > 1)
    return protocol::make_error(protocol::ErrorCode::invalid_request,
                                "KV layout has an unknown dtype or order");
  if (pool.base == nullptr || l.num_pages == 0)
    return protocol::make_error(protocol::ErrorCode::invalid_request, "KV pool is empty");
  if (reinterpret_cast<uintptr_t>(pool.base) % protocol::dtype_size(l.dtype) != 0)
    return protocol::make_error(protocol::ErrorCode::invalid_request, "KV pool base is misaligned");
  return {};
}

protocol::Result<DType> parse_dtype(std::string_view name) {
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    if (name == dtype_name(t)) return t;
  return protocol::make_error(protocol::ErrorCode::invalid_request,
                              "unknown KV dtype '" + std::string(name) + "' (expected f32, f16 or bf16)");
}

protocol::Result<KvDimOrder> parse_dim_order(std::string_view name) {
  for (KvDimOrder o : {KvDimOrder::token_head_dim, KvDimOrder::head_token_dim})
    if (name == dim_order_name(o)) return o;
  return protocol::make_error(
      protocol::ErrorCode::invalid_request,
      "unknown KV order '" + std::string(name) + "' (expected token_head_dim or head_token_dim)");
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
  }
  return "unknown";
}

std::string_view dim_order_name(KvDimOrder o) {
  switch (o) {
    case KvDimOrder::token_head_dim:
      return "token_head_dim";
    case KvDimOrder::head_token_dim:
      return "head_token_dim";
  }
  return "unknown";
}

uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // keep NaN a NaN
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float bf16_to_f32(uint16_t h) {
  return std::bit_cast<float>(uint32_t{h} << 16);
}

uint16_t f32_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);   // NaN
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to >= 65520: inf
  if (a < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    if (a < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25: rounds to zero
    const uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;
    const int shift = 126 - static_cast<int>(a >> 23);  // half subnormal = mant * 2^(exp - 126)
    const uint32_t keep = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    uint32_t r = keep;
    if (rem > half || (rem == half && (keep & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  // Normal: rebias the exponent (127 -> 15), round the mantissa from 23 to 10 bits.
  uint32_t r = a - 0x38000000u;
  r += 0xFFFu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | (r >> 13));
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0) {
    const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);  // mant * 2^-24, exact
    return std::bit_cast<float>(std::bit_cast<uint32_t>(v) | sign);
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

void KvView::store(uint32_t layer, uint32_t kind, PageId page, uint32_t slot, const float* src) const {
  std::byte* p = base_ + l_.page_offset(layer, kind, page);
  for (uint32_t h = 0; h < l_.kv_heads; ++h) {
    const uint64_t e = elem_index(slot, h);
    const float* s = src + uint64_t{h} * l_.head_dim;
    switch (l_.dtype) {
      case DType::f32:
        std::memcpy(p + e * 4, s, l_.head_dim * 4);
        break;
      case DType::f16:
        for (uint32_t d = 0; d < l_.head_dim; ++d) {
          const uint16_t v = f32_to_f16(s[d]);
          std::memcpy(p + (e + d) * 2, &v, 2);
        }
        break;
      case DType::bf16:
        for (uint32_t d = 0; d < l_.head_dim; ++d) {
          const uint16_t v = f32_to_bf16(s[d]);
          std::memcpy(p + (e + d) * 2, &v, 2);
        }
        break;
    }
  }
}

namespace {

// `rows` vectors of `n` halves, `stride` elements apart, to f32: one version per ISA level (GCC function
// multi-versioning picks it at load time). vcvtph2ps is exact, as f16_to_f32 is; the portable version
// is half_vec.hpp's arithmetic.
#if EPD_HAS_MULTIVERSION
#define EPD_TARGET(isa) __attribute__((target(isa)))
#else
#define EPD_TARGET(isa)
#endif

// The portable loop of both half types: sixteen elements at a time by `sixteen` (to f32 at its second
// argument), the rest one by one.
template <class Sixteen, class One>
[[gnu::always_inline]] inline void halves_to_f32(const uint16_t* src, size_t stride, size_t rows, size_t n,
                                                 float* dst, Sixteen sixteen, One one) {
  for (size_t r = 0; r < rows; ++r, src += stride, dst += n) {
    size_t d = 0;
    for (; d + 16 <= n; d += 16) sixteen(src + d, dst + d);
    for (; d < n; ++d) dst[d] = one(src[d]);
  }
}

EPD_TARGET("default")
void convert_f16_rows(const uint16_t* src, size_t stride, size_t rows, size_t n, float* dst) {
  halves_to_f32(
      src, stride, rows, n, dst,
      [](const uint16_t* p, float* out) {
        const kernels::F32x16 v = kernels::f16x16_to_f32(p);
        std::memcpy(out, &v, sizeof v);
      },
      f16_to_f32);
}

#if EPD_HAS_MULTIVERSION
EPD_TARGET("arch=x86-64-v3")
void convert_f16_rows(const uint16_t* src, size_t stride, size_t rows, size_t n, float* dst) {
  for (size_t r = 0; r < rows; ++r, src += stride, dst += n) {
    size_t d = 0;
    for (; d + 8 <= n; d += 8)
      _mm256_storeu_ps(dst + d, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + d))));
    for (; d < n; ++d) dst[d] = f16_to_f32(src[d]);
  }
}

EPD_TARGET("arch=x86-64-v4")
void convert_f16_rows(const uint16_t* src, size_t stride, size_t rows, size_t n, float* dst) {
  for (size_t r = 0; r < rows; ++r, src += stride, dst += n) {
    size_t d = 0;
    for (; d + 16 <= n; d += 16)
      _mm512_storeu_ps(dst + d, _mm512_maskz_cvtph_ps(
                                    0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + d))));
    for (; d < n; ++d) dst[d] = f16_to_f32(src[d]);
  }
}
#endif

}  // namespace

void f16_rows_to_f32(const uint16_t* src, size_t stride, size_t rows, size_t n, float* dst) {
  convert_f16_rows(src, stride, rows, n, dst);
}

EPD_MULTIVERSION void bf16_rows_to_f32(const uint16_t* src, size_t stride, size_t rows, size_t n,
                                       float* dst) {
  halves_to_f32(
      src, stride, rows, n, dst,
      [](const uint16_t* p, float* out) {
        const kernels::F32x16 v = kernels::bf16x16_to_f32(p);
        std::memcpy(out, &v, sizeof v);
      },
      bf16_to_f32);
}

// Sixteen elements at a time where the head allows (half_vec.hpp: the same bits as the scalar functions).
EPD_MULTIVERSION const float* KvView::load_converted(uint32_t layer, uint32_t kind, PageId page,
                                                     uint32_t slot, uint32_t head, float* scratch) const {
  const std::byte* p = base_ + l_.page_offset(layer, kind, page) + elem_index(slot, head) * 2;
  const bool f16 = l_.dtype == DType::f16;
  uint32_t d = 0;
  for (; d + 16 <= l_.head_dim; d += 16) {
    const kernels::F32x16 v = f16 ? kernels::f16x16_to_f32(p + d * 2) : kernels::bf16x16_to_f32(p + d * 2);
    std::memcpy(scratch + d, &v, sizeof v);
  }
  for (; d < l_.head_dim; ++d) {
    uint16_t v;
    std::memcpy(&v, p + d * 2, 2);
    scratch[d] = f16 ? f16_to_f32(v) : bf16_to_f32(v);
  }
  return scratch;
}

uint64_t kv_digest(const KvPool& pool, std::span<const PageId> pages) {
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  const KvLayout& l = pool.layout;
  for (uint32_t layer = 0; layer < l.layers; ++layer)
    for (uint32_t kind = 0; kind < 2; ++kind)
      for (PageId pg : pages) XXH64_update(st, pool.base + l.page_offset(layer, kind, pg), l.page_bytes());
  const uint64_t h = XXH64_digest(st);
  XXH64_freeState(st);
  return h;
}

}  // namespace epd::model
