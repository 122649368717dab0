#pragma once
// Helpers for a backend's opaque connection info: a backend describes its blob as a struct with the
// protocol's `fields()` pattern and stores it msgpack-encoded under its name in SegmentDescriptor::backends.
#include <optional>
#include <string_view>
#include <vector>

#include "epd/protocol/codec.hpp"
#include "epd/transport/backend.hpp"

namespace epd::transport {

template <class Info>
std::vector<uint8_t> encode_info(const Info& info) {
  return protocol::encode_value(info);
}

// `peer`'s blob for `backend` decoded as Info; nullopt when absent or malformed (the peer is then treated as
// not offering that backend).
template <class Info>
std::optional<Info> decode_info(const protocol::SegmentDescriptor& peer, std::string_view backend) {
  const std::vector<uint8_t>* blob = peer_info(peer, backend);
  if (!blob) return std::nullopt;
  protocol::CodecLimits limits;
  limits.max_frame_bytes = 1u << 20;
  limits.max_array = 1u << 16;  // per-region entries
  limits.max_str = 4096;
  limits.max_bin = 4096;
  auto info = protocol::decode_value<Info>(*blob, limits);
  if (!info) return std::nullopt;
  return std::move(info).value();
}

}  // namespace epd::transport
