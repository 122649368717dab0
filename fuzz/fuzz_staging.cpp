// The staging rules (actors/src/cache/staging_ring.cpp, docs/staging.md): decode's StagingRing hands out
// space in a ring, prefill's StagingWindow checks decode's grants and WATERMARKs and decides when a chunk may
// be written. The input is a sequence of operations (reserve, consume, release a room, a hostile grant or
// WATERMARK). Invariants: a grant lies inside the ring and after every earlier one; the watermark never goes
// backwards and never passes what was handed out; a window fed the ring's WATERMARKs agrees with the ring and
// places each grant where the ring did; two unscattered chunks that may both be written never share a byte; a
// hostile grant or WATERMARK the window accepts is inside the ring.
#include <map>
#include <utility>

#include "cache/staging_ring.hpp"
#include "fuzz_check.hpp"

using namespace epd::actors;
using epd::fuzz::FuzzInput;
using epd::protocol::StagingRsp;
using epd::protocol::Watermark;

namespace {

struct Live {
  uint64_t position;
  uint64_t bytes;
};

bool share_a_byte(uint64_t size, const Live& a, const Live& b) {
  const uint64_t a0 = a.position % size, b0 = b.position % size;  // a chunk never straddles the end
  return a0 < b0 + b.bytes && b0 < a0 + a.bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const uint64_t ring_size = 1 + in.take<uint16_t>() % 4096;
  StagingRing ring(ring_size);
  StagingWindow window(ring_size);   // fed the ring's own WATERMARKs
  StagingWindow hostile(ring_size);  // fed whatever the input says
  std::map<std::pair<uint64_t, uint32_t>, Live> live;
  uint64_t last_end = 0, last_watermark = 0;

  for (int step = 0; step < 256 && !in.empty(); ++step) {
    const uint8_t op = in.take<uint8_t>();
    const uint64_t room = in.take<uint8_t>() % 8;
    const uint32_t chunk = in.take<uint8_t>() % 8;
    switch (op % 5) {
      case 0:
      case 1: {
        const uint64_t bytes = in.take<uint16_t>() % (ring_size + 2);
        auto grant = ring.reserve(room, chunk, bytes);
        if (!grant) break;
        FUZZ_CHECK(bytes > 0 && grant->bytes == bytes);
        FUZZ_CHECK(grant->offset < ring_size && grant->offset + bytes <= ring_size);
        const uint64_t position = grant->round * ring_size + grant->offset;
        FUZZ_CHECK(position >= last_end);
        last_end = position + bytes;
        StagingRsp rsp;
        rsp.room = room;
        rsp.chunk = chunk;
        rsp.offset = grant->offset;
        rsp.round = grant->round;
        auto at = window.position_of(rsp, bytes);
        FUZZ_CHECK(at.ok() && *at == position);
        FUZZ_CHECK(live.emplace(std::make_pair(room, chunk), Live{position, bytes}).second);
        break;
      }
      case 2:
        ring.consume(room, chunk);
        live.erase({room, chunk});
        break;
      case 3:
        ring.release_room(room);
        std::erase_if(live, [&](const auto& kv) { return kv.first.first == room; });
        break;
      default: {
        Watermark w{in.take<uint64_t>(), in.take<uint64_t>()};
        const uint64_t before = hostile.watermark();
        if (hostile.advance(w)) {
          FUZZ_CHECK(w.tail < ring_size && hostile.watermark() >= before);
          FUZZ_CHECK(hostile.watermark() % ring_size == w.tail);
        } else {
          FUZZ_CHECK(hostile.watermark() == before);
        }
        StagingRsp rsp;
        rsp.offset = in.take<uint64_t>();
        rsp.round = in.take<uint64_t>();
        const uint64_t bytes = in.take<uint64_t>();
        if (auto at = hostile.position_of(rsp, bytes)) {
          FUZZ_CHECK(rsp.offset < ring_size && bytes <= ring_size - rsp.offset);
          FUZZ_CHECK(*at % ring_size == rsp.offset);
        }
        break;
      }
    }
    FUZZ_CHECK(ring.watermark() >= last_watermark && ring.watermark() <= last_end);
    FUZZ_CHECK(ring.used() <= last_end);
    last_watermark = ring.watermark();
    FUZZ_CHECK(window.advance(ring.watermark_message()).ok());
    FUZZ_CHECK(window.watermark() == ring.watermark());
    for (const auto& [k, v] : live) FUZZ_CHECK(v.position >= ring.watermark());
    // Safety: two chunks prefill may write (may_write stays true once true, so a chunk that may not has not
    // been written yet) never share a byte: no write lands on bytes decode has still to scatter.
    for (auto a = live.begin(); a != live.end(); ++a)
      for (auto b = std::next(a); b != live.end(); ++b)
        if (window.may_write(a->second.position, a->second.bytes) &&
            window.may_write(b->second.position, b->second.bytes))
          FUZZ_CHECK(!share_a_byte(ring_size, a->second, b->second));
  }
  return 0;
}
