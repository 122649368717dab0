#include "stream_copy.hpp"

#include <cstring>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace epd::transport::shm {

void stream_copy(uint8_t* dst, const uint8_t* src, size_t n) {
#if defined(__SSE2__)
  constexpr size_t kLine = 64;
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
  for (size_t i = 0; i < body; i += kLine) {
#if defined(__AVX512F__)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), _mm512_loadu_si512(src + i));
#elif defined(__AVX__)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32)));
#else
    for (size_t j = 0; j < kLine; j += 16)
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + j),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + j)));
#endif
  }
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
