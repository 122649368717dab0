#include "cache/staging_ring.hpp"

namespace epd::actors {

using protocol::ErrorCode;
using protocol::make_error;

protocol::Result<StagingGrant> StagingRing::reserve(uint64_t room, uint32_t chunk, uint64_t bytes) {
  if (bytes == 0 || bytes > size_)
    return make_error(ErrorCode::oversized, "chunk of " + std::to_string(bytes) +
                                                " bytes can never fit a staging ring of " +
                                                std::to_string(size_) + " bytes");
  if (find(room, chunk))
    return make_error(ErrorCode::invalid_request, "chunk " + std::to_string(chunk) + " of room " +
                                                      std::to_string(room) + " already has staging space");
  uint64_t start = head_;
  if (start % size_ + bytes > size_) start = (start / size_ + 1) * size_;  // never straddle the end
  entries_.push_back({room, chunk, start, bytes, false});
  head_ = start + bytes;
  return StagingGrant{start % size_, start / size_, bytes};
}

std::optional<StagingGrant> StagingRing::find(uint64_t room, uint32_t chunk) const {
  for (const auto& e : entries_)
    if (e.room == room && e.chunk == chunk && !e.consumed)
      return StagingGrant{e.start % size_, e.start / size_, e.bytes};
  return std::nullopt;
}

bool StagingRing::trim() {
  bool moved = false;
  while (!entries_.empty() && entries_.front().consumed) {
    entries_.pop_front();
    moved = true;
  }
  return moved;
}

bool StagingRing::consume(uint64_t room, uint32_t chunk) {
  for (auto& e : entries_)
    if (e.room == room && e.chunk == chunk && !e.consumed) {
      e.consumed = true;
      return trim();
    }
  return false;
}

bool StagingRing::release_room(uint64_t room) {
  for (auto& e : entries_)
    if (e.room == room) e.consumed = true;
  return trim();
}

protocol::Result<uint64_t> StagingWindow::position_of(const protocol::StagingRsp& rsp, uint64_t bytes) const {
  uint64_t base = 0, position = 0;
  if (rsp.offset >= size_ || bytes > size_ - rsp.offset)
    return make_error(ErrorCode::out_of_range, "staging grant [" + std::to_string(rsp.offset) + ", +" +
                                                   std::to_string(bytes) + ") lies outside the ring of " +
                                                   std::to_string(size_) + " bytes");
  if (__builtin_mul_overflow(rsp.round, size_, &base) || __builtin_add_overflow(base, rsp.offset, &position))
    return make_error(ErrorCode::out_of_range, "staging round " + std::to_string(rsp.round) + " overflows");
  return position;
}

protocol::Status StagingWindow::advance(const protocol::Watermark& w) {
  uint64_t base = 0, position = 0;
  if (w.tail >= size_)
    return make_error(ErrorCode::out_of_range, "WATERMARK tail " + std::to_string(w.tail) +
                                                   " is past the ring of " + std::to_string(size_) +
                                                   " bytes");
  if (__builtin_mul_overflow(w.round, size_, &base) || __builtin_add_overflow(base, w.tail, &position))
    return make_error(ErrorCode::out_of_range, "WATERMARK round " + std::to_string(w.round) + " overflows");
  if (position < watermark_)
    return make_error(ErrorCode::invalid_request,
                      "WATERMARK (round " + std::to_string(w.round) + ", tail " + std::to_string(w.tail) +
                          ") goes backwards from round " + std::to_string(watermark_ / size_) + ", tail " +
                          std::to_string(watermark_ % size_));
  watermark_ = position;
  return {};
}

}  // namespace epd::actors
