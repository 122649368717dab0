#include "kernels.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

namespace epd::model::kernels {
namespace {
constexpr size_t kLanes = 16;

float reduce_lanes(float* acc) {
  for (size_t w = kLanes / 2; w >= 1; w /= 2)
    for (size_t j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}
}  // namespace

float dot(const float* a, const float* b, size_t n) {
  float acc[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) acc[j] += a[i + j] * b[i + j];
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return reduce_lanes(acc) + tail;
}

float sum(const float* a, size_t n) {
  float acc[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) acc[j] += a[i + j];
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i];
  return reduce_lanes(acc) + tail;
}

void matmul(const float* x, size_t rows, size_t in, const float* w, size_t out, float* y) {
  // Row tiles keep x in cache while each weight row is streamed once per tile.
  constexpr size_t kTile = 16;
  for (size_t r0 = 0; r0 < rows; r0 += kTile) {
    const size_t r1 = std::min(rows, r0 + kTile);
    for (size_t o = 0; o < out; ++o) {
      const float* wo = w + o * in;
      for (size_t r = r0; r < r1; ++r) y[r * out + o] = dot(wo, x + r * in, in);
    }
  }
}

void rmsnorm(const float* x, const float* g, size_t n, float eps, float* y) {
  const float ms = dot(x, x, n) / static_cast<float>(n);
  const float scale = 1.0f / std::sqrt(ms + eps);  // sqrt is correctly rounded by IEEE 754
  for (size_t i = 0; i < n; ++i) y[i] = x[i] * scale * g[i];
}

float exp_det(float x) {
  x = x >= -87.0f ? x : -87.0f;  // also maps NaN (from a corrupted KV page) to a defined value
  x = x <= 88.0f ? x : 88.0f;
  const float k = std::floor(x * 1.44269504f + 0.5f);
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

void swiglu(float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] = a[i] / (1.0f + exp_det(-a[i])) * b[i];
}

void rope(float* x, const float* cos_t, const float* sin_t, size_t n) {
  for (size_t i = 0; i < n / 2; ++i) {
    const float x0 = x[2 * i], x1 = x[2 * i + 1];
    x[2 * i] = x0 * cos_t[i] - x1 * sin_t[i];
    x[2 * i + 1] = x0 * sin_t[i] + x1 * cos_t[i];
  }
}

void axpy(float w, const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += w * x[i];
}

}  // namespace epd::model::kernels
