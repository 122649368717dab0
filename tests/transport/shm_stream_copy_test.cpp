// The shm writer's streaming copy moves exactly the bytes memcpy would, at every alignment and length, and
// touches nothing outside the destination range.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "shm/stream_copy.hpp"
#include "test_util.hpp"

using namespace epd::transport::shm;

namespace {

// Copies src[src_off, +n) to dst[dst_off, +n) with `copy` and checks the destination byte for byte,
// including the guard bytes on both sides.
void check_copy(void (*copy)(uint8_t*, const uint8_t*, size_t), size_t n, size_t src_off, size_t dst_off) {
  constexpr size_t kGuard = 128;
  std::vector<uint8_t> src(n + src_off + kGuard), dst(n + dst_off + 2 * kGuard, 0xA5);
  epd::test::fill_random(src.data(), src.size(), n * 131 + src_off * 7 + dst_off);
  std::vector<uint8_t> expect = dst;
  std::memcpy(expect.data() + kGuard + dst_off, src.data() + src_off, n);
  copy(dst.data() + kGuard + dst_off, src.data() + src_off, n);
  INFO("n " << n << " src_off " << src_off << " dst_off " << dst_off);
  CHECK(dst == expect);
}

}  // namespace

TEST_CASE("shm stream copy equals memcpy at every alignment and length", "[shm][unit]") {
  for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{127}, size_t{128},
                   size_t{1000}, size_t{4096}, size_t{4097}, size_t{65536 + 17}})
    for (size_t src_off : {0, 1, 31, 63})
      for (size_t dst_off : {0, 1, 8, 33, 63}) check_copy(stream_copy, n, src_off, dst_off);
}

TEST_CASE("shm copy_to_peer equals memcpy below and above the streaming threshold", "[shm][unit]") {
  for (size_t n : {kStreamCopyMinBytes - 1, kStreamCopyMinBytes, kStreamCopyMinBytes + 4095, size_t{3} << 20})
    for (size_t off : {0, 7, 64}) check_copy(copy_to_peer, n, off, (off * 3) % 64);
}
