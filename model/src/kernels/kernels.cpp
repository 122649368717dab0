#include "kernels/kernels.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "epd/model/kv_cache.hpp"
#include "kernels/multiversion.hpp"

namespace epd::model::kernels {

namespace {

// dot(a_k, b_k) for k < 4 with exactly dot()'s operations each; inlined, so a pointer passed four times is
// loaded once.
[[gnu::always_inline]] inline void four_dots(const float* a0, const float* b0, const float* a1,
                                             const float* b1, const float* a2, const float* b2,
                                             const float* a3, const float* b3, size_t n, float* out) {
  float s0[kLanes] = {}, s1[kLanes] = {}, s2[kLanes] = {}, s3[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) {
      s0[j] += a0[i + j] * b0[i + j];
      s1[j] += a1[i + j] * b1[i + j];
      s2[j] += a2[i + j] * b2[i + j];
      s3[j] += a3[i + j] * b3[i + j];
    }
  float t0 = 0.0f, t1 = 0.0f, t2 = 0.0f, t3 = 0.0f;
  for (; i < n; ++i) {
    t0 += a0[i] * b0[i];
    t1 += a1[i] * b1[i];
    t2 += a2[i] * b2[i];
    t3 += a3[i] * b3[i];
  }
  out[0] = reduce_lanes(s0) + t0;
  out[1] = reduce_lanes(s1) + t1;
  out[2] = reduce_lanes(s2) + t2;
  out[3] = reduce_lanes(s3) + t3;
}

}  // namespace

EPD_MULTIVERSION void dot4(const float* w, const float* x0, const float* x1, const float* x2, const float* x3,
                           size_t n, float* out) {
  four_dots(w, x0, w, x1, w, x2, w, x3, n, out);
}

EPD_MULTIVERSION void dot4_rows(const float* w0, const float* w1, const float* w2, const float* w3,
                                const float* x, size_t n, float* out) {
  four_dots(w0, x, w1, x, w2, x, w3, x, n, out);
}

void matmul(const float* x, size_t rows, size_t in, const float* w, size_t out, float* y) {
  matmul_cols(x, rows, in, w, 0, out, y, out);
}

EPD_MULTIVERSION void matmul_cols(const float* x, size_t rows, size_t in, const float* w, size_t o_begin,
                                  size_t o_end, float* y, size_t ldy) {
  // Row tiles keep x in cache while each weight row is streamed once per tile.
  constexpr size_t kTile = 16;
  for (size_t r0 = 0; r0 < rows; r0 += kTile) {
    const size_t r1 = std::min(rows, r0 + kTile);
    const size_t r4 = r0 + (r1 - r0) / 4 * 4;
    for (size_t o = o_begin; r4 > r0 && o < o_end; ++o) {
      const float* wo = w + o * in;
      for (size_t r = r0; r < r4; r += 4) {
        float res[4];
        four_dots(wo, x + r * in, wo, x + (r + 1) * in, wo, x + (r + 2) * in, wo, x + (r + 3) * in, in,
                  res);  // dot4, inlined so that it runs in this clone's ISA
        for (size_t k = 0; k < 4; ++k) y[(r + k) * ldy + o] = res[k];
      }
    }
    // Rows left over (all of them in decode at batch 1): four weight rows at a time against one input row,
    // so four independent sums are in flight instead of one dependent chain.
    for (size_t r = r4; r < r1; ++r) {
      const float* xr = x + r * in;
      size_t o = o_begin;
      for (; o + 4 <= o_end; o += 4) {
        float res[4];
        const float* wo = w + o * in;
        four_dots(wo, xr, wo + in, xr, wo + 2 * in, xr, wo + 3 * in, xr, in, res);  // dot4_rows, inlined
        for (size_t k = 0; k < 4; ++k) y[r * ldy + o + k] = res[k];
      }
      for (; o < o_end; ++o) y[r * ldy + o] = dot(w + o * in, xr, in);
    }
  }
}

EPD_MULTIVERSION void rmsnorm(const float* x, const float* g, size_t n, float eps, float* y) {
  const float ms = dot(x, x, n) / static_cast<float>(n);
  const float scale = 1.0f / std::sqrt(ms + eps);  // sqrt is correctly rounded by IEEE 754
  for (size_t i = 0; i < n; ++i) y[i] = x[i] * scale * g[i];
}

EPD_MULTIVERSION void swiglu(float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] = a[i] / (1.0f + exp_det(-a[i])) * b[i];
}

EPD_MULTIVERSION float dot_f16(const uint16_t* a, const uint16_t* b, size_t n) {
  float acc[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    _Float16 ha[kLanes], hb[kLanes];  // conversions to f32 are exact
    std::memcpy(ha, a + i, sizeof ha);
    std::memcpy(hb, b + i, sizeof hb);
    for (size_t j = 0; j < kLanes; ++j) acc[j] += static_cast<float>(ha[j]) * static_cast<float>(hb[j]);
  }
  float tail = 0.0f;
  for (; i < n; ++i) tail += f16_to_f32(a[i]) * f16_to_f32(b[i]);
  return reduce_lanes(acc) + tail;
}

void geglu_f16_table(float* a, const float* b, size_t n) {
  static const std::vector<float> table = [] {
    std::vector<float> t(size_t{1} << 16);
    for (size_t i = 0; i < t.size(); ++i) {
      const float x = f16_to_f32(static_cast<uint16_t>(i));
      const float g =
          0.5f * x * (1.0f + std::tanh(0.79788456080286535587989211986876f * x * (1.0f + 0.044715f * x * x)));
      t[i] = f16_to_f32(f32_to_f16(g));
    }
    return t;
  }();
  for (size_t i = 0; i < n; ++i) {
    const float x = a[i];
    const float g = x <= -10.0f ? 0.0f : x >= 10.0f ? x : table[f32_to_f16(x)];
    a[i] = g * b[i];
  }
}

EPD_MULTIVERSION void softmax_prefix(float* s, size_t visible, size_t len) {
  // The maximum over 16 lanes (a > b ? a : b is one vector max instruction), then the lanes.
  float acc[kLanes];
  for (size_t j = 0; j < kLanes; ++j) acc[j] = s[0];
  size_t i = 0;
  for (; i + kLanes <= visible; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) acc[j] = s[i + j] > acc[j] ? s[i + j] : acc[j];
  float m = acc[0];
  for (size_t j = 1; j < kLanes; ++j) m = acc[j] > m ? acc[j] : m;
  for (; i < visible; ++i) m = s[i] > m ? s[i] : m;
  for (size_t p = 0; p < visible; ++p) s[p] = exp_det(s[p] - m);
  const float inv = 1.0f / sum(s, visible);
  for (size_t p = 0; p < visible; ++p) s[p] *= inv;
  for (size_t p = visible; p < len; ++p) s[p] = 0.0f;
}

EPD_MULTIVERSION void rope(float* x, const float* cos_t, const float* sin_t, size_t n) {
  for (size_t i = 0; i < n / 2; ++i) {
    const float x0 = x[2 * i], x1 = x[2 * i + 1];
    x[2 * i] = x0 * cos_t[i] - x1 * sin_t[i];
    x[2 * i + 1] = x0 * sin_t[i] + x1 * cos_t[i];
  }
}

EPD_MULTIVERSION void rope_neox(float* x, const float* cos_t, const float* sin_t, size_t n) {
  const size_t half = n / 2;
  for (size_t i = 0; i < half; ++i) {
    const float x0 = x[i], x1 = x[i + half];
    x[i] = x0 * cos_t[i] - x1 * sin_t[i];
    x[i + half] = x0 * sin_t[i] + x1 * cos_t[i];
  }
}

}  // namespace epd::model::kernels
