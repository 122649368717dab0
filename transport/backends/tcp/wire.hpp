#pragma once
// The tcp backend's frames (docs/transport.md has the byte table). Fixed-size little-endian headers so the
// receiver can read a header, validate it, and then receive the payload straight into the target region.
#include <bit>
#include <cstdint>
#include <cstring>

namespace epd::transport::tcp {

static_assert(std::endian::native == std::endian::little, "frames are little-endian and copied as-is");

inline constexpr uint32_t kWriteMagic = 0x57445045;  // "EPDW" on the wire
inline constexpr uint32_t kReplyMagic = 0x41445045;  // "EPDA" on the wire
// 2: write headers carry a fence key; 3: lanes open with a hello; 4: a hello under a wrong token is nacked
inline constexpr uint8_t kWireVersion = 4;
inline constexpr uint8_t kTypeWrite = 1;
inline constexpr uint8_t kTypeAck = 2;   // every frame up to and including seq is in place
inline constexpr uint8_t kTypeNack = 3;  // frames before seq are in place; seq was refused with `code`
// The first frame of every lane: a WriteHeader with the token, len 0. The right token authenticates the
// connection at once (no reply), so an idle lane is not taken for a stranger's (ConnectionGate). A wrong one
// is answered with a nack of seq 0 (bad_token) and the connection closed, so a writer holding a stale
// descriptor learns it before its first write and frees its place in the gate at once.
inline constexpr uint8_t kTypeHello = 4;
// A receiver never accepts a longer payload: it bounds what a hostile header can make it drain.
inline constexpr uint64_t kMaxFrameBytes = 64ull << 20;

struct WriteHeader {  // 48 bytes, then `len` payload bytes
  uint32_t magic = kWriteMagic;
  uint8_t version = kWireVersion;
  uint8_t type = kTypeWrite;
  uint16_t reserved = 0;
  uint64_t seq = 0;
  uint64_t token = 0;
  uint64_t addr = 0;  // in the receiver's address space
  uint64_t len = 0;
  uint64_t fence = 0;  // the receiver's grant for the target units (0: the target is not fenced)
};
static_assert(sizeof(WriteHeader) == 48);

struct Reply {  // 16 bytes
  uint32_t magic = kReplyMagic;
  uint8_t version = kWireVersion;
  uint8_t type = kTypeAck;
  uint16_t code = 0;  // ErrorCode for a nack
  uint64_t seq = 0;
};
static_assert(sizeof(Reply) == 16);

}  // namespace epd::transport::tcp
