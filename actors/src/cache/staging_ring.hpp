#pragma once
// Staging between heterogeneous KV layouts (docs/staging.md). Decode owns a ring of bytes; prefill writes a
// chunk (a token range in the staging format) into it with one bulk write, decode scatters it into its own
// pool and reports how far the ring has been consumed.
//
// Space is handed out in order along a logical position that only grows: position = round * size + offset.
// A chunk never straddles the end of the ring (the rest of that round is skipped). The watermark is the
// logical position below which everything handed out has been consumed, so a writer may fill
// [position, position + bytes) once watermark + size >= position + bytes: the bytes it overwrites belong to a
// round that has been scattered.
#include <cstdint>
#include <deque>
#include <optional>

#include "epd/protocol/messages.hpp"
#include "epd/protocol/result.hpp"

namespace epd::actors {

struct StagingGrant {
  uint64_t offset = 0;
  uint64_t round = 0;
  uint64_t bytes = 0;
};

// The rule both sides apply: may [position, position + bytes) be written when the ring of `size` bytes has
// been consumed up to `watermark`?
constexpr bool staging_write_allowed(uint64_t size, uint64_t watermark, uint64_t position, uint64_t bytes) {
  return watermark + size >= position + bytes;
}

// Decode's side: hands out space, tracks what is consumed.
class StagingRing {
 public:
  explicit StagingRing(uint64_t size) : size_(size) {}

  // Space for chunk `chunk` of `room`. `oversized` when bytes is 0 or larger than the whole ring (it can
  // never fit); `invalid_request` when that chunk already has space.
  protocol::Result<StagingGrant> reserve(uint64_t room, uint32_t chunk, uint64_t bytes);
  // The grant of a chunk that is neither consumed nor released.
  std::optional<StagingGrant> find(uint64_t room, uint32_t chunk) const;
  // The chunk was scattered: its space may be reused. True when the watermark moved.
  bool consume(uint64_t room, uint32_t chunk);
  // Every chunk of the room: nothing will write or read its space any more. True when the watermark moved.
  bool release_room(uint64_t room);

  uint64_t size() const { return size_; }
  uint64_t watermark() const { return entries_.empty() ? head_ : entries_.front().start; }
  protocol::Watermark watermark_message() const { return {watermark() / size_, watermark() % size_}; }
  uint64_t used() const { return head_ - watermark(); }  // handed out and not consumed (skipped ends too)
  uint64_t rounds() const { return head_ / size_; }      // times the ring wrapped
  size_t chunks() const { return entries_.size(); }

 private:
  struct Entry {
    uint64_t room;
    uint32_t chunk;
    uint64_t start;
    uint64_t bytes;
    bool consumed;
  };
  bool trim();  // drops consumed entries at the front; true when any went

  uint64_t size_;
  uint64_t head_ = 0;
  std::deque<Entry> entries_;  // handed out, in position order
};

// Prefill's view of one decode's ring: its size (from the decode's segment descriptor) and the newest
// watermark. Validates what decode says before anything is written.
class StagingWindow {
 public:
  explicit StagingWindow(uint64_t size) : size_(size) {}

  // The logical position of a grant for `bytes`; an error when the grant lies (partly) outside the ring or
  // its position overflows.
  protocol::Result<uint64_t> position_of(const protocol::StagingRsp& rsp, uint64_t bytes) const;
  // Applies a WATERMARK; refuses a tail past the ring and a watermark that goes backwards.
  protocol::Status advance(const protocol::Watermark& w);
  bool may_write(uint64_t position, uint64_t bytes) const {
    return staging_write_allowed(size_, watermark_, position, bytes);
  }
  uint64_t size() const { return size_; }
  uint64_t watermark() const { return watermark_; }

 private:
  uint64_t size_;
  uint64_t watermark_ = 0;
};

}  // namespace epd::actors
