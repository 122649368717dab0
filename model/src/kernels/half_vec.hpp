#pragma once
// Sixteen KV elements of an f16 or bf16 pool to f32 at once, in plain integer and float vector arithmetic
// (GCC's vector extension, lowered to the ISA of the multi-versioned clone that inlines it). Both are exact
// and give the bits of f16_to_f32 / bf16_to_f32 (kv_cache.hpp) for every input, NaNs and subnormals
// included.
// Why not `__builtin_convertvector` of a _Float16 vector: without AVX512-FP16, GCC converts those one
// element at a time with shuffles in between, which made an f16 pool's decode slower than an f32 one's
// although it reads half the bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace epd::model::kernels {

// Returning a vector by value would depend on the ISA (-Wpsabi warns, at every use); these helpers are
// always inlined, so no value ever crosses a call. The includer's file is silenced for the same reason.
#pragma GCC diagnostic ignored "-Wpsabi"

using F32x16 = float __attribute__((vector_size(64)));
using U16x16 = uint16_t __attribute__((vector_size(32)));
using U32x16 = uint32_t __attribute__((vector_size(64)));

[[gnu::always_inline]] inline U32x16 widen16(const void* src) {
  U16x16 h;
  std::memcpy(&h, src, sizeof h);
  return __builtin_convertvector(h, U32x16);
}

// IEEE binary16 -> binary32: exponent and mantissa moved into place and rebiased; infinities and NaNs get
// the f32 maximum exponent; a subnormal half m * 2^-24 is made as (1 + m/1024) * 2^-14 - 2^-14, where
// every step is exact.
[[gnu::always_inline]] inline F32x16 f16x16_to_f32(const void* src) {
  const U32x16 h = widen16(src);
  const U32x16 sign = (h & 0x8000u) << 16;
  const U32x16 in_place = (h & 0x7FFFu) << 13;
  const U32x16 exp = in_place & 0x0F800000u;
  U32x16 bits = in_place + 0x38000000u;                                // exponent 15 -> 127 bias
  bits += reinterpret_cast<U32x16>(exp == 0x0F800000u) & 0x38000000u;  // inf / NaN -> exponent 255
  F32x16 sub;
  const U32x16 sub_in = bits + 0x00800000u;
  std::memcpy(&sub, &sub_in, sizeof sub);
  sub -= 6.103515625e-05f;  // 2^-14
  U32x16 sub_bits;
  std::memcpy(&sub_bits, &sub, sizeof sub_bits);
  const U32x16 is_sub = reinterpret_cast<U32x16>(exp == 0u);
  bits = ((sub_bits & is_sub) | (bits & ~is_sub)) | sign;
  F32x16 out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// bfloat16 -> binary32: the upper half of the f32.
[[gnu::always_inline]] inline F32x16 bf16x16_to_f32(const void* src) {
  const U32x16 bits = widen16(src) << 16;
  F32x16 out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

}  // namespace epd::model::kernels
