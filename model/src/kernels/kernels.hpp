#pragma once
// Numeric kernels of the reference model. Determinism rule: every float result is defined by the source
// order of operations alone. The target is built with -ffp-contract=off (no FMA fusion) and without
// -ffast-math, so any ISA or vector width gives the same bits; reductions use a fixed 16-lane pattern
// that the compiler can vectorise without reassociating.
#include <bit>
#include <cstddef>
#include <cstdint>

namespace epd::model::kernels {

inline constexpr size_t kLanes = 16;

// Folds 16 lanes in a fixed tree: 8 pairs, then 4, 2, 1 (written out so it compiles to shuffles).
inline float reduce_lanes(float* acc) {
  for (size_t j = 0; j < 8; ++j) acc[j] += acc[j + 8];
  for (size_t j = 0; j < 4; ++j) acc[j] += acc[j + 4];
  for (size_t j = 0; j < 2; ++j) acc[j] += acc[j + 2];
  return acc[0] + acc[1];
}

// sum_i a[i]*b[i]: lane j accumulates i = j mod 16, then the fixed tree, then the tail. Inline so the
// attention loops avoid a call per position; the result does not depend on where it is inlined.
inline float dot(const float* a, const float* b, size_t n) {
  float acc[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) acc[j] += a[i + j] * b[i + j];
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return reduce_lanes(acc) + tail;
}

inline float sum(const float* a, size_t n) {
  float acc[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) acc[j] += a[i + j];
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i];
  return reduce_lanes(acc) + tail;
}

// sum_i a[i]*b[i] of half-precision (IEEE binary16) values: each product is exact in f32, summed in dot()'s
// lanes and tree, so every CPU gives the same bits (ggml's vec_dot_f16 sums in half precision where the CPU
// has AVX512-FP16, in f32 elsewhere).
float dot_f16(const uint16_t* a, const uint16_t* b, size_t n);

// y[r][o] = dot(w[o], x[r]) for r < rows, o < out; w is out x in, row-major. Each output element is one
// dot() call, so a row's result does not depend on how many rows are computed together.
void matmul(const float* x, size_t rows, size_t in, const float* w, size_t out, float* y);

// The output columns [o_begin, o_end) of matmul, y with row stride ldy: the same operations per element,
// so splitting the columns over threads gives the same bits.
void matmul_cols(const float* x, size_t rows, size_t in, const float* w, size_t o_begin, size_t o_end,
                 float* y, size_t ldy);

// Four dot(w, x_k) at once, sharing the loads of w. Each result is computed with exactly the operations
// of dot(), so it is bit-identical to it.
void dot4(const float* w, const float* x0, const float* x1, const float* x2, const float* x3, size_t n,
          float* out);

// Four dot(w_k, x) at once, sharing the loads of x (one input row against many weight rows, as in decode at
// batch 1). Each result is computed with exactly the operations of dot(), so it is bit-identical to it.
void dot4_rows(const float* w0, const float* w1, const float* w2, const float* w3, const float* x, size_t n,
               float* out);

// y = x / sqrt(mean(x^2) + eps) * g
void rmsnorm(const float* x, const float* g, size_t n, float eps, float* y);

// exp with a fixed polynomial (no libm: libm may pick ISA-specific code paths). Input clamped to
// [-87, 88] (NaN counts as -87), so the result is always finite and > 0. Inline so softmax vectorises.
inline float exp_det(float x) {
  x = x >= -87.0f ? x : -87.0f;  // also maps NaN (from a corrupted KV page) to a defined value
  x = x <= 88.0f ? x : 88.0f;
  // Round to nearest with the 1.5 * 2^23 trick (IEEE round-to-nearest-even); no libm call, vectorises.
  const float k = (x * 1.44269504f + 12582912.0f) - 12582912.0f;
  // Cody-Waite reduction with ln2 split in two, then a degree-6 Taylor polynomial on |r| <= 0.35.
  const float r = (x - k * 0.693145751953125f) - k * 1.42860682030941723212e-6f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t e = static_cast<int32_t>(k) + 127;  // in [1, 254] thanks to the clamp
  return p * std::bit_cast<float>(static_cast<uint32_t>(e) << 23);
}

// a[i] = silu(a[i]) * b[i]
void swiglu(float* a, const float* b, size_t n);

// a[i] = gelu(a[i]) * b[i] with GELU's tanh approximation as llama.cpp's CPU back end computes it
// (ggml_vec_geglu_f32 under GGML_GELU_FP16): a[i] rounded to f16 indexes a table of gelu values rounded to
// f16; 0 at or below -10, the identity at or above 10.
void geglu_f16_table(float* a, const float* b, size_t n);

// s[0, visible) = softmax(s[0, visible)) (max subtracted, exp_det, divided by the fixed-order sum), and
// s[visible, len) = 0: one causal row of attention weights.
void softmax_prefix(float* s, size_t visible, size_t len);

// Rotates pairs (x[2i], x[2i+1]) by the angles whose cos/sin are given (n/2 each).
void rope(float* x, const float* cos_t, const float* sin_t, size_t n);
// Rotates pairs (x[i], x[i + n/2]) ("rotate half", llama.cpp's NEOX order).
void rope_neox(float* x, const float* cos_t, const float* sin_t, size_t n);

// y += w * x
inline void axpy(float w, const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += w * x[i];
}

}  // namespace epd::model::kernels
