#pragma once
// The first page of a small memfd each shm-serving engine exports next to its regions. A writer maps it read
// only and compares the token with the one in the descriptor it was given: a stale or forged descriptor
// (other token, or a pid that now belongs to another process) is refused before any byte moves. The owner
// clears the token when its engine stops, so writers holding old mappings notice at their next batch.
#include <atomic>
#include <cstdint>

namespace epd::transport::shm {

inline constexpr uint64_t kControlMagic = 0x4c5254434d485345ull;  // "ESHMCTRL"
inline constexpr uint32_t kControlVersion = 1;

struct ControlPage {
  uint64_t magic;
  uint32_t version;
  int32_t pid;
  uint64_t incarnation;
  std::atomic<uint64_t> token;  // 0 = revoked
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "the token is read across processes");

}  // namespace epd::transport::shm
