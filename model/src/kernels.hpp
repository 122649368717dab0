#pragma once
// Numeric kernels of the reference model. Determinism rule: every float result is defined by the source
// order of operations alone. The target is built with -ffp-contract=off (no FMA fusion) and without
// -ffast-math, so any ISA or vector width gives the same bits; reductions use a fixed 16-lane pattern
// that the compiler can vectorise without reassociating.
#include <cstddef>
#include <cstdint>

namespace epd::model::kernels {

// sum_i a[i]*b[i]: lane j accumulates i = j mod 16, then a fixed pairwise tree, then the tail.
float dot(const float* a, const float* b, size_t n);
float sum(const float* a, size_t n);

// y[r][o] = dot(w[o], x[r]) for r < rows, o < out; w is out x in, row-major. Each output element is one
// dot() call, so a row's result does not depend on how many rows are computed together.
void matmul(const float* x, size_t rows, size_t in, const float* w, size_t out, float* y);

// y = x / sqrt(mean(x^2) + eps) * g
void rmsnorm(const float* x, const float* g, size_t n, float eps, float* y);

// exp with a fixed polynomial (no libm: libm may pick ISA-specific code paths). Input clamped to
// [-87, 88] (NaN counts as -87), so the result is always finite and > 0.
float exp_det(float x);

// a[i] = silu(a[i]) * b[i]
void swiglu(float* a, const float* b, size_t n);

// Rotates pairs (x[2i], x[2i+1]) by the angles whose cos/sin are given (n/2 each).
void rope(float* x, const float* cos_t, const float* sin_t, size_t n);

// y += w * x
void axpy(float w, const float* x, float* y, size_t n);

}  // namespace epd::model::kernels
