#pragma once
// The checks of the tcp wire's fixed-size frames, apart from the sockets that carry them: the receiver and
// the sender call these, and so does the fuzzer (fuzz/fuzz_tcp_frame.cpp), which cannot open sockets.
#include <cstdint>

#include "epd/protocol/errors.hpp"
#include "wire.hpp"

namespace epd::transport::tcp {

// Whether a write header keeps the stream framed: ok, bad_header (magic, version, type or reserved bits
// wrong) or frame_too_large (len over kMaxFrameBytes). Any error loses the framing: close the connection.
constexpr protocol::ErrorCode check_write_framing(const WriteHeader& h) {
  if (h.magic != kWriteMagic || h.version != kWireVersion || h.type != kTypeWrite || h.reserved != 0)
    return protocol::ErrorCode::bad_header;
  if (h.len > kMaxFrameBytes) return protocol::ErrorCode::frame_too_large;
  return protocol::ErrorCode::ok;
}

// A lane's first frame (kTypeHello): the token, nothing to place, no reply.
constexpr bool is_hello(const WriteHeader& h) {
  return h.magic == kWriteMagic && h.version == kWireVersion && h.type == kTypeHello && h.len == 0 &&
         h.reserved == 0;
}

// Whether [addr, addr + len) lies inside [base, base + length), without overflowing for any input.
constexpr bool range_inside(uint64_t base, uint64_t length, uint64_t addr, uint64_t len) {
  return addr >= base && len <= length && addr - base <= length - len;
}

// Whether a reply is one the sender understands (an ack or a nack of this wire version); its seq is checked
// against the frames in flight by the caller.
constexpr bool reply_well_formed(const Reply& r) {
  return r.magic == kReplyMagic && r.version == kWireVersion && (r.type == kTypeAck || r.type == kTypeNack);
}

}  // namespace epd::transport::tcp
