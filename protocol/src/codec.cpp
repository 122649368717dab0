#include "epd/protocol/codec.hpp"

#include <algorithm>
#include <cstring>
#include <exception>

namespace epd::protocol {
namespace {

constexpr char kMagic[4] = {'E', 'P', 'D', '1'};

void put_be(std::vector<uint8_t>& out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint64_t get_be(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | p[i];
  return v;
}

// Decodes the body into the variant alternative whose kType matches `type`.
template <size_t I = 0>
Result<Body> decode_body(MessageType type, const msgpack::object& o) {
  if constexpr (I == std::variant_size_v<Body>) {
    return make_error(ErrorCode::unknown_type, "no decoder for message type " + std::to_string(int(type)));
  } else {
    using T = std::variant_alternative_t<I, Body>;
    if (T::kType != type) return decode_body<I + 1>(type, o);
    T msg{};
    detail::Reader reader;
    if (!reader.read_struct(o, msg)) {
      Error e = reader.error();
      e.detail = std::string(type_name(type)) + ": " + e.detail;
      return e;
    }
    return Body{std::move(msg)};
  }
}

}  // namespace

bool valid_instance_id(std::string_view id) {
  if (id.empty() || id.size() > kMaxSenderIdBytes) return false;
  for (char c : id)
    if (c < 0x21 || c > 0x7e) return false;
  return true;
}

std::vector<uint8_t> encode(const Envelope& env) {
  std::vector<uint8_t> out;
  out.reserve(64);
  out.insert(out.end(), kMagic, kMagic + 4);
  out.push_back(kProtocolVersion);
  out.push_back(0);
  put_be(out, static_cast<uint16_t>(env.type()), 2);
  put_be(out, env.incarnation, 8);
  // An invalid sender id is a programming error; encode what fits so the receiver rejects it clearly.
  const size_t n = std::min(env.sender.size(), kMaxSenderIdBytes);
  out.push_back(static_cast<uint8_t>(n));
  out.insert(out.end(), env.sender.begin(), env.sender.begin() + n);

  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  std::visit([&](const auto& msg) { detail::Writer<msgpack::sbuffer>(pk).write_struct(msg); }, env.body);
  out.insert(out.end(), reinterpret_cast<const uint8_t*>(buf.data()),
             reinterpret_cast<const uint8_t*>(buf.data()) + buf.size());
  return out;
}

Result<Header> decode_header(std::span<const uint8_t> frame, const CodecLimits& limits) {
  if (frame.size() > limits.max_frame_bytes)
    return make_error(ErrorCode::frame_too_large, "frame of " + std::to_string(frame.size()) +
                                                      " bytes exceeds the limit of " +
                                                      std::to_string(limits.max_frame_bytes));
  if (frame.size() < 4 || std::memcmp(frame.data(), kMagic, 4) != 0)
    return make_error(ErrorCode::bad_magic, "frame does not start with \"EPD1\"");
  if (frame.size() < kHeaderFixedBytes)
    return make_error(ErrorCode::bad_header,
                      "header truncated at " + std::to_string(frame.size()) + " bytes");
  Header h;
  h.version = frame[4];
  if (h.version != kProtocolVersion)
    return make_error(
        ErrorCode::unsupported_version,
        "version " + std::to_string(h.version) + " not supported, speak " + std::to_string(kProtocolVersion));
  if (frame[5] != 0) return make_error(ErrorCode::bad_header, "reserved flags byte is not 0");
  const uint64_t raw_type = get_be(frame.data() + 6, 2);
  if (!is_known_type(raw_type))
    return make_error(ErrorCode::unknown_type, "unknown message type " + std::to_string(raw_type));
  h.type = static_cast<MessageType>(raw_type);
  h.incarnation = get_be(frame.data() + 8, 8);
  const size_t n = frame[16];
  if (frame.size() < kHeaderFixedBytes + n) return make_error(ErrorCode::bad_header, "sender id truncated");
  h.sender.assign(reinterpret_cast<const char*>(frame.data()) + kHeaderFixedBytes, n);
  if (!valid_instance_id(h.sender))
    return make_error(ErrorCode::bad_header, "sender id must be 1..64 printable ASCII characters");
  return h;
}

namespace detail {
Result<msgpack::object_handle> unpack_whole(std::span<const uint8_t> bytes, const CodecLimits& limits) {
  if (bytes.empty()) return make_error(ErrorCode::malformed_body, "empty body");
  // msgpack allocates room for every element an array or map header declares before reading one, so a few
  // bytes declaring a million elements cost 24 MB (found by fuzz/fuzz_codec). Every element takes at least a
  // byte (an entry two), so a larger count can never be valid: refuse it from the header.
  const msgpack::unpack_limit limit(std::min(limits.max_array, bytes.size()),
                                    std::min(limits.max_map, bytes.size() / 2), limits.max_str,
                                    limits.max_bin,
                                    /*ext=*/0, limits.max_depth);
  std::size_t off = 0;
  msgpack::object_handle handle;
  try {
    handle = msgpack::unpack(reinterpret_cast<const char*>(bytes.data()), bytes.size(), off, nullptr, nullptr,
                             limit);
  } catch (const std::exception& e) {
    return make_error(ErrorCode::malformed_body,
                      std::string("body is not valid msgpack within limits: ") + e.what());
  }
  if (off != bytes.size())
    return make_error(ErrorCode::trailing_bytes,
                      std::to_string(bytes.size() - off) + " bytes follow the msgpack body");
  return handle;
}
}  // namespace detail

Result<Envelope> decode(std::span<const uint8_t> frame, const CodecLimits& limits) {
  auto header = decode_header(frame, limits);
  if (!header) return header.error();
  const size_t body_at = kHeaderFixedBytes + header->sender.size();
  auto handle = detail::unpack_whole(frame.subspan(body_at), limits);
  if (!handle) {
    Error e = handle.error();
    e.detail = std::string(type_name(header->type)) + ": " + e.detail;
    return e;
  }
  auto body = decode_body(header->type, handle->get());
  if (!body) return body.error();
  return Envelope{std::move(header->sender), header->incarnation, std::move(body.value())};
}

}  // namespace epd::protocol
