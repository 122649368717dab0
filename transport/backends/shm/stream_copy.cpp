#include "stream_copy.hpp"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace epd::transport::shm {
namespace {

constexpr size_t kLine = 64;

#if defined(__x86_64__)
// One loop per store width, each compiled for its ISA (the build itself targets baseline x86-64); the widest
// the CPU has is chosen once. All take a 64-byte-aligned dst and a multiple of 64 bytes.
[[gnu::target("avx512f")]] void stream_lines_avx512(uint8_t* dst, const uint8_t* src, size_t body) {
  for (size_t i = 0; i < body; i += kLine)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), _mm512_loadu_si512(src + i));
}

[[gnu::target("avx")]] void stream_lines_avx(uint8_t* dst, const uint8_t* src, size_t body) {
  for (size_t i = 0; i < body; i += kLine) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32)));
  }
}

void stream_lines_sse2(uint8_t* dst, const uint8_t* src, size_t body) {
  for (size_t i = 0; i < body; i += kLine)
    for (size_t j = 0; j < kLine; j += 16)
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + j),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + j)));
}

using StreamLines = void (*)(uint8_t*, const uint8_t*, size_t);

StreamLines widest_stream_lines() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return stream_lines_avx512;
  if (__builtin_cpu_supports("avx")) return stream_lines_avx;
  return stream_lines_sse2;
}
#endif

}  // namespace

void stream_copy(uint8_t* dst, const uint8_t* src, size_t n) {
#if defined(__x86_64__)
  static const StreamLines stream_lines = widest_stream_lines();
  // Streaming stores want an aligned destination: copy up to the first cache line boundary normally.
  const size_t head = (kLine - (reinterpret_cast<uintptr_t>(dst) & (kLine - 1))) & (kLine - 1);
  if (n < head + kLine) {
    std::memcpy(dst, src, n);
    return;
  }
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  const size_t body = n & ~(kLine - 1);
  stream_lines(dst, src, body);
  _mm_sfence();  // streaming stores are weakly ordered: make them visible before anything after us
  std::memcpy(dst + body, src + body, n - body);
#else
  std::memcpy(dst, src, n);
#endif
}

void copy_to_peer(uint8_t* dst, const uint8_t* src, size_t n) {
  if (n >= kStreamCopyMinBytes)
    stream_copy(dst, src, n);
  else
    std::memcpy(dst, src, n);
}

}  // namespace epd::transport::shm
