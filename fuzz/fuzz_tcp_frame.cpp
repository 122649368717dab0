// The tcp backend's data plane (transport/backends/tcp/): the receiver reads 48-byte write headers from a
// stream, checks each (frame_check.hpp) and the fence table (transport/src/fence.cpp), then receives the
// payload straight into registered memory. This target replays that loop over the input as the stream, with
// the same order of checks as Receiver::serve, against fake regions backed by buffers, so a range check that
// lets a byte out of its region is a heap overflow ASan reports. The first byte picks the stream:
// even: the receiver's write frames; odd: the sender's 16-byte replies.
// Invariants: range_inside agrees with exact 128-bit arithmetic; a placed payload lies inside its region.
#include <vector>

#include "epd/transport/fence.hpp"
#include "fuzz_check.hpp"
#include "tcp/frame_check.hpp"

using namespace epd::transport;
using namespace epd::transport::tcp;
using epd::fuzz::FuzzInput;
using epd::protocol::ErrorCode;

namespace {

// The seeds in fuzz/corpus/tcp_frame carry these (fuzz/make_seeds.cpp writes them).
constexpr uint64_t kToken = 0x746f6b656e2d3432;
constexpr uint64_t kFenceKey = 0x66656e63652d3137;
constexpr uint64_t kFenceUnit = 256;

struct FakeRegion {
  uint64_t base;
  std::vector<uint8_t> mem;
};

bool exact_inside(uint64_t base, uint64_t length, uint64_t addr, uint64_t len) {
  using u128 = unsigned __int128;
  return addr >= base && u128(addr) + len <= u128(base) + length;
}

void receive(FuzzInput& in) {
  // An ordinary region, one ending at the top of the address space (overflowing sums), a fenced one.
  std::vector<FakeRegion> regions;
  regions.push_back({0x10000, std::vector<uint8_t>(4096)});
  regions.push_back({UINT64_MAX - 4095, std::vector<uint8_t>(4096)});
  regions.push_back({0x200000, std::vector<uint8_t>(4 * kFenceUnit)});
  FenceTable fences;
  fences.add_region(regions[2].base, regions[2].mem.size(), kFenceUnit);
  const uint64_t units[] = {0, 1};
  const uint64_t key = fences.grant(regions[2].base, units, kFenceKey);
  FUZZ_CHECK(key == kFenceKey);
  if (in.take<uint8_t>() & 1) FUZZ_CHECK(fences.revoke(key));  // a stale writer's key

  while (!in.empty()) {
    const auto raw = in.take_bytes(sizeof(WriteHeader));
    if (raw.size() < sizeof(WriteHeader)) return;  // the stream ended inside a header
    WriteHeader h;
    std::memcpy(&h, raw.data(), sizeof(h));
    const ErrorCode framing = check_write_framing(h);
    if (framing != ErrorCode::ok) {
      FUZZ_CHECK(framing == ErrorCode::bad_header || framing == ErrorCode::frame_too_large);
      return;  // the receiver closes the connection
    }
    FUZZ_CHECK(h.len <= kMaxFrameBytes);
    ErrorCode refused = ErrorCode::ok;
    FakeRegion* target = nullptr;
    for (auto& r : regions) {
      const bool inside = range_inside(r.base, r.mem.size(), h.addr, h.len);
      FUZZ_CHECK(inside == exact_inside(r.base, r.mem.size(), h.addr, h.len));
      if (inside && !target) target = &r;
    }
    auto admission = FenceTable::Admission::unfenced;
    if (h.token != kToken)
      refused = ErrorCode::bad_token;
    else if (!target)
      refused = ErrorCode::out_of_range;
    else if ((admission = fences.admit(h.fence, h.addr, h.len)) == FenceTable::Admission::refused)
      refused = ErrorCode::fenced;
    const auto payload = in.take_bytes(h.len);
    if (refused != ErrorCode::ok) continue;  // drained and nacked
    // Bytes land in the fenced region only under a live grant. (A zero-length write just past its end counts
    // as unfenced, one inside it as refused: nothing is written either way.)
    FUZZ_CHECK(target != &regions[2] || h.len == 0 || admission == FenceTable::Admission::admitted);
    const uint64_t offset = h.addr - target->base;
    FUZZ_CHECK(offset <= target->mem.size() && h.len <= target->mem.size() - offset);
    std::memcpy(target->mem.data() + offset, payload.data(), payload.size());
    if (admission == FenceTable::Admission::admitted) fences.landed(h.fence);
    if (payload.size() < h.len) return;  // the stream ended inside the payload
  }
}

void replies(FuzzInput& in) {
  while (!in.empty()) {
    const auto raw = in.take_bytes(sizeof(Reply));
    if (raw.size() < sizeof(Reply)) return;
    Reply r;
    std::memcpy(&r, raw.data(), sizeof(r));
    if (!reply_well_formed(r)) return;  // the sender fails the lane
    FUZZ_CHECK(r.magic == kReplyMagic && (r.type == kTypeAck || r.type == kTypeNack));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  if (in.take<uint8_t>() & 1)
    replies(in);
  else
    receive(in);
  return 0;
}
