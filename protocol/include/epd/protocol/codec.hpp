#pragma once
// The one codec for control-plane frames: Envelope <-> bytes. Pure functions, no I/O.
//
// Frame layout (docs/protocol.md):
//   0..3   magic "EPD1"
//   4      version (u8)
//   5      flags (u8, must be 0)
//   6..7   message type (u16, big-endian)
//   8..15  sender incarnation (u64, big-endian)
//   16     sender id length N (u8, 1..64)
//   17..   sender id (N bytes, printable ASCII)
//   ...    body: one msgpack map, nothing after it
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "epd/protocol/field_codec.hpp"
#include "epd/protocol/messages.hpp"
#include "epd/protocol/result.hpp"

namespace epd::protocol {

inline constexpr uint8_t kProtocolVersion = 1;
inline constexpr size_t kHeaderFixedBytes = 17;
inline constexpr size_t kMaxSenderIdBytes = 64;

struct CodecLimits {
  size_t max_frame_bytes = 32u << 20;  // a SUBMIT carries the image
  size_t max_array = 1u << 20;         // page lists
  size_t max_map = 64;
  size_t max_str = 1u << 20;
  size_t max_bin = 32u << 20;
  size_t max_depth = 8;
};

struct Header {
  uint8_t version = kProtocolVersion;
  MessageType type = MessageType::error;
  uint64_t incarnation = 0;
  std::string sender;
};

struct Envelope {
  std::string sender;
  uint64_t incarnation = 0;
  Body body;

  MessageType type() const { return type_of(body); }
};

std::vector<uint8_t> encode(const Envelope& env);
// Full decode: header, then body, with every check of docs/protocol.md. Never throws.
Result<Envelope> decode(std::span<const uint8_t> frame, const CodecLimits& limits = {});
// Header only (to address an error reply when the body is bad).
Result<Header> decode_header(std::span<const uint8_t> frame, const CodecLimits& limits = {});

bool valid_instance_id(std::string_view id);

namespace detail {
Result<msgpack::object_handle> unpack_whole(std::span<const uint8_t> bytes, const CodecLimits& limits);
}

// Standalone structs (e.g. a SegmentDescriptor stored or sent on its own).
template <class T>
std::vector<uint8_t> encode_value(const T& value) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  detail::Writer<msgpack::sbuffer>(pk).write_struct(value);
  return {reinterpret_cast<const uint8_t*>(buf.data()),
          reinterpret_cast<const uint8_t*>(buf.data()) + buf.size()};
}

template <class T>
Result<T> decode_value(std::span<const uint8_t> bytes, const CodecLimits& limits = {}) {
  auto handle = detail::unpack_whole(bytes, limits);
  if (!handle) return handle.error();
  T out{};
  detail::Reader reader;
  if (!reader.read_struct(handle->get(), out)) return reader.error();
  return out;
}

}  // namespace epd::protocol
