#include "attention/blocked_attention.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstring>

#include "kernels/kernels.hpp"
#include "kernels/multiversion.hpp"

namespace epd::model::detail {
namespace {

namespace k = kernels;

// Sixteen floats as one value: GCC's vector extension, lowered to whatever vectors the clone's ISA has (one
// AVX-512 register, two AVX2 ones, four SSE ones). Plain loops over a head here get interchanged or left
// scalar by the optimiser; these say exactly which sums are vectors.
// Passing such a value between functions would depend on the ISA (-Wpsabi says so); these helpers are
// always inlined, so no value ever crosses a call.
#pragma GCC diagnostic ignored "-Wpsabi"
using Vec = float __attribute__((vector_size(64)));
constexpr size_t kVec = 16;

[[gnu::always_inline]] inline Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

[[gnu::always_inline]] inline float reduce(Vec v) {
  float lanes[kVec];
  std::memcpy(lanes, &v, sizeof v);
  return k::reduce_lanes(lanes);
}

// Positions [b, e) of head g's K or V vectors of an f16 or bf16 pool as contiguous f32 rows in `out`, one
// conversion call (kv_cache.hpp: the CPU's own conversion instructions) per page's run of positions.
inline void convert_positions(const KvView& kv, uint32_t layer, uint32_t kind, std::span<const PageId> pages,
                              size_t b, size_t e, uint32_t g, float* out) {
  const KvLayout& l = kv.layout();
  const size_t hd = l.head_dim, ps = l.page_size;
  const size_t stride = l.order == KvDimOrder::token_head_dim ? size_t{l.kv_heads} * hd : hd;
  const auto convert = l.dtype == DType::f16 ? f16_rows_to_f32 : bf16_rows_to_f32;
  for (size_t p = b; p < e;) {
    const size_t slot = p % ps, n = std::min(e - p, ps - slot);
    const auto* src =
        reinterpret_cast<const uint16_t*>(kv.raw(layer, kind, pages[p / ps], static_cast<uint32_t>(slot), g));
    convert(src, stride, n, hd, out + (p - b) * hd);
    p += n;
  }
}

// The K (kind 0) or V (kind 1) vector of position p for head g in an f32 pool, and a prefetch of the one
// kAhead positions later: keys and values stream from memory once per step, and with the pool's
// interleaved heads the hardware prefetcher alone leaves the loads waiting.
constexpr uint32_t kAhead = 8;

[[gnu::always_inline]] inline const float* kv_vector(const KvView& kv, uint32_t layer, uint32_t kind,
                                                     const RowTarget& row, uint32_t p, uint32_t e, uint32_t g,
                                                     float* conv) {
  const uint32_t ps = kv.layout().page_size;
  if (p + kAhead < e) {
    const std::byte* next = kv.raw(layer, kind, row.pages[(p + kAhead) / ps], (p + kAhead) % ps, g);
    for (size_t off = 0; off < kv.layout().head_dim * sizeof(float); off += 64)
      __builtin_prefetch(next + off);
  }
  return kv.load(layer, kind, row.pages[p / ps], p % ps, g, conv);
}

// The segment's scores for each of the group's query heads: scores[j * kDecodeSegment + i] for position
// b + i, each the dot product of the query head with the key, summed in 16 lanes then kernels' fixed tree.
// Positions outermost: each key is read once for the whole group.
template <size_t HD>
[[gnu::always_inline]] inline void segment_scores(const KvView& kv, uint32_t layer, const RowTarget& row,
                                                  uint32_t g, uint32_t b, uint32_t e, size_t group,
                                                  size_t hd_runtime, const float* qg, const float* converted,
                                                  DecodeScratch& sc) {
  const size_t hd = HD ? HD : hd_runtime;
  sc.conv.resize(hd);
  for (uint32_t p = b; p < e; ++p) {
    const float* key =
        converted ? converted + size_t{p - b} * hd : kv_vector(kv, layer, 0, row, p, e, g, sc.conv.data());
    for (size_t j = 0; j < group; ++j) {
      const float* qj = qg + j * hd;
      float& out = sc.scores[j * kDecodeSegment + (p - b)];
      if constexpr (HD != 0 && HD % kVec == 0) {
        Vec acc = load(qj) * load(key);
        for (size_t c = kVec; c < HD; c += kVec) acc += load(qj + c) * load(key + c);
        out = reduce(acc);
      } else {
        out = k::dot(qj, key, hd);
      }
    }
  }
}

// acc[j] (hd floats each) = the weights of query head j x the segment's values, summed in position order.
// Positions outermost: each value is read once for the whole group.
template <size_t HD>
[[gnu::always_inline]] inline void segment_values(const KvView& kv, uint32_t layer, const RowTarget& row,
                                                  uint32_t g, uint32_t b, uint32_t e, size_t group,
                                                  size_t hd_runtime, const float* converted,
                                                  DecodePartial& out, DecodeScratch& sc) {
  const size_t hd = HD ? HD : hd_runtime;
  std::fill(out.acc.begin(), out.acc.end(), 0.0f);
  for (uint32_t p = b; p < e; ++p) {
    const float* v =
        converted ? converted + size_t{p - b} * hd : kv_vector(kv, layer, 1, row, p, e, g, sc.conv.data());
    for (size_t j = 0; j < group; ++j) {
      const float w = sc.scores[j * kDecodeSegment + (p - b)];
      float* acc = &out.acc[j * hd];
      if constexpr (HD != 0 && HD % kVec == 0) {
        for (size_t c = 0; c < HD; c += kVec) {
          const Vec sum = load(acc + c) + w * load(v + c);
          std::memcpy(acc + c, &sum, sizeof sum);
        }
      } else {
        k::axpy(w, v, acc, hd);
      }
    }
  }
}

// Inlined into the multi-versioned entry point, so its loops are compiled for each ISA level.
template <size_t HD>
[[gnu::always_inline]] inline void decode_segment(const ModelConfig& cfg, const KvView& kv, uint32_t layer,
                                                  const RowTarget& row, uint32_t g, uint32_t s,
                                                  uint32_t window, const float* q, DecodePartial& out,
                                                  DecodeScratch& sc) {
  const size_t hd = cfg.head_dim, group = cfg.heads / cfg.kv_heads;
  const uint32_t len = row.pos + 1, b = std::max(s * kDecodeSegment, first_visible(row.pos, window)),
                 e = std::min(len, s * kDecodeSegment + kDecodeSegment);
  const float* qg = q + size_t{g} * group * hd;
  sc.scores.resize(group * kDecodeSegment);
  out.max.resize(group);
  out.sum.resize(group);
  out.acc.resize(group * hd);
  // An f16 or bf16 pool's segment is converted to f32 once, then read as an f32 pool's would be.
  const bool convert = kv.layout().dtype != DType::f32;
  if (convert) {
    sc.keys.resize(size_t{e - b} * hd);
    convert_positions(kv, layer, 0, row.pages, b, e, g, sc.keys.data());
  }
  segment_scores<HD>(kv, layer, row, g, b, e, group, hd, qg, convert ? sc.keys.data() : nullptr, sc);
  for (size_t j = 0; j < group; ++j) {
    float* sj = &sc.scores[j * kDecodeSegment];
    const uint32_t n = e - b;
    float m = sj[0];
    for (uint32_t i = 1; i < n; ++i) m = sj[i] > m ? sj[i] : m;
    for (uint32_t i = 0; i < n; ++i) sj[i] = k::exp_det(sj[i] - m);
    out.max[j] = m;
    out.sum[j] = k::sum(sj, n);
  }
  if (convert) {
    sc.values.resize(size_t{e - b} * hd);
    convert_positions(kv, layer, 1, row.pages, b, e, g, sc.values.data());
  }
  segment_values<HD>(kv, layer, row, g, b, e, group, hd, convert ? sc.values.data() : nullptr, out, sc);
}

}  // namespace

EPD_MULTIVERSION void attend_prompt_rows(const ModelConfig& cfg, const KvView& kv, uint32_t layer,
                                         std::span<const PageId> pages, uint32_t start, size_t r0, size_t r1,
                                         uint32_t g, uint32_t window, const float* q, size_t q_stride,
                                         float* out, size_t out_stride, PromptAttentionScratch& sc,
                                         const uint32_t* sees_to) {
  const size_t hd = cfg.head_dim, group = cfg.heads / cfg.kv_heads, rows = (r1 - r0) * group;
  // The last position each row sees: its own, or past it within its image.
  const auto last_seen = [&](size_t r) -> size_t { return sees_to ? sees_to[r] : start + r; };
  size_t end = start + r1;
  for (size_t r = r0; sees_to && r < r1; ++r) end = std::max(end, last_seen(r) + 1);
  // Positions [base, base + len): from the first one the block's first row sees to the last one any sees.
  const size_t base = first_visible(static_cast<uint32_t>(start + r0), window), len = end - base;
  const uint32_t ps = kv.layout().page_size;
  sc.k.resize(len * hd);
  sc.v.resize(len * hd);
  sc.conv.resize(hd);
  if (kv.layout().dtype != DType::f32) {
    convert_positions(kv, layer, 0, pages, base, base + len, g, sc.k.data());
    convert_positions(kv, layer, 1, pages, base, base + len, g, sc.v.data());
  } else {
    for (size_t i = 0; i < len; ++i) {
      const size_t p = base + i;
      const PageId page = pages[p / ps];
      std::copy_n(kv.load(layer, 0, page, p % ps, g, sc.conv.data()), hd, &sc.k[i * hd]);
      std::copy_n(kv.load(layer, 1, page, p % ps, g, sc.conv.data()), hd, &sc.v[i * hd]);
    }
  }
  // The group's query heads of each row, one after another: row (r, j) is query head g * group + j of r.
  sc.q.resize(rows * hd);
  for (size_t r = r0; r < r1; ++r)
    std::copy_n(q + r * q_stride + g * group * hd, group * hd, &sc.q[(r - r0) * group * hd]);
  sc.scores.resize(rows * len);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(len),
              static_cast<int>(hd), 1.0f, sc.q.data(), static_cast<int>(hd), sc.k.data(),
              static_cast<int>(hd), 0.0f, sc.scores.data(), static_cast<int>(len));
  for (size_t i = 0; i < rows; ++i) {  // row (r, j) sees [first_visible(start + r), last_seen(r)]
    const uint32_t pos = static_cast<uint32_t>(start + r0 + i / group);
    const size_t lo = first_visible(pos, window) - base;
    float* row_scores = &sc.scores[i * len];
    std::fill(row_scores, row_scores + lo, 0.0f);
    k::softmax_prefix(row_scores + lo, last_seen(r0 + i / group) + 1 - base - lo, len - lo);
  }
  sc.out.resize(rows * hd);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows), static_cast<int>(hd),
              static_cast<int>(len), 1.0f, sc.scores.data(), static_cast<int>(len), sc.v.data(),
              static_cast<int>(hd), 0.0f, sc.out.data(), static_cast<int>(hd));
  for (size_t r = r0; r < r1; ++r)
    std::copy_n(&sc.out[(r - r0) * group * hd], group * hd, out + r * out_stride + g * group * hd);
}

EPD_MULTIVERSION void attend_decode_segment(const ModelConfig& cfg, const KvView& kv, uint32_t layer,
                                            const RowTarget& row, uint32_t g, uint32_t s, uint32_t window,
                                            const float* q, DecodePartial& out, DecodeScratch& sc) {
  switch (cfg.head_dim) {  // the common head sizes with their accumulators in registers
    case 64:
      return decode_segment<64>(cfg, kv, layer, row, g, s, window, q, out, sc);
    case 128:
      return decode_segment<128>(cfg, kv, layer, row, g, s, window, q, out, sc);
    default:
      return decode_segment<0>(cfg, kv, layer, row, g, s, window, q, out, sc);
  }
}

void combine_decode_segments(const ModelConfig& cfg, uint32_t g, std::span<const DecodePartial> segments,
                             float* out) {
  const size_t hd = cfg.head_dim, group = cfg.heads / cfg.kv_heads;
  for (size_t j = 0; j < group; ++j) {
    float* o = out + (size_t{g} * group + j) * hd;
    float m = segments[0].max[j];
    for (const DecodePartial& s : segments) m = s.max[j] > m ? s.max[j] : m;
    float total = 0.0f;
    std::fill(o, o + hd, 0.0f);
    for (const DecodePartial& s : segments) {
      const float scale = k::exp_det(s.max[j] - m);
      total += scale * s.sum[j];
      for (size_t d = 0; d < hd; ++d) o[d] += scale * s.acc[j * hd + d];
    }
    const float inv = 1.0f / total;
    for (size_t d = 0; d < hd; ++d) o[d] *= inv;
  }
}

}  // namespace epd::model::detail
