#pragma once
// The aux record prefill writes last into decode's aux slot: the first generated token and the room id as a
// stamp. Decode trusts the KV pages only if the stamp equals the room it expects (a stale or misdirected
// write shows up as a mismatch, and the room fails as corrupt).
#include <cstdint>

namespace epd::actors {

struct AuxRecord {
  uint32_t first_token = 0;
  uint32_t reserved = 0;
  uint64_t stamp = 0;  // room id
};
static_assert(sizeof(AuxRecord) == 16);

inline constexpr const char* kKvRegion = "kv";        // decode's KV pool; prefill's local KV pool
inline constexpr const char* kAuxRegion = "aux";      // decode's aux slots; prefill's aux sources
inline constexpr const char* kEmbedRegion = "embed";  // prefill's landing slots; encoder's source slots
inline constexpr const char* kStagingRegion = "staging";  // decode's staging ring (docs/staging.md)
inline constexpr const char* kStageSourceRegion = "stage-src";  // prefill's gathered chunks being written

}  // namespace epd::actors
