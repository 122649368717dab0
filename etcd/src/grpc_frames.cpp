#include "grpc_frames.hpp"

namespace epd::etcd::detail {

using protocol::ErrorCode;
using protocol::make_error;

namespace {

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(v));
}

// A varint at `pos`, moving past it; nullopt when truncated or longer than 10 bytes.
std::optional<uint64_t> get_varint(std::string_view in, size_t& pos) {
  uint64_t v = 0;
  for (int shift = 0; shift < 70 && pos < in.size(); shift += 7) {
    const uint8_t b = uint8_t(in[pos++]);
    v |= uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  return std::nullopt;
}

}  // namespace

std::string encode_keep_alive_request(int64_t lease) {
  std::string out;
  out.push_back(char(1 << 3 | 0));  // field 1, varint
  put_varint(out, uint64_t(lease));
  return out;
}

std::string grpc_message(std::string_view payload) {
  std::string out;
  out.reserve(5 + payload.size());
  const auto n = uint32_t(payload.size());
  out.push_back(0);
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(char(uint8_t(n >> shift)));
  out.append(payload);
  return out;
}

std::optional<protocol::Result<std::string>> take_grpc_message(std::string& buffer) {
  if (buffer.size() < 5) return std::nullopt;
  const uint8_t flag = uint8_t(buffer[0]);
  uint32_t n = 0;
  for (int i = 1; i <= 4; ++i) n = n << 8 | uint8_t(buffer[i]);
  if (flag != 0)
    return protocol::Result<std::string>(make_error(
        ErrorCode::malformed_body, "gRPC message with flag " + std::to_string(flag) + " (none was offered)"));
  if (n > kMaxGrpcMessage)
    return protocol::Result<std::string>(make_error(
        ErrorCode::malformed_body, "gRPC message of " + std::to_string(n) + " bytes for a lease renewal"));
  if (buffer.size() < 5 + size_t(n)) return std::nullopt;
  std::string payload = buffer.substr(5, n);
  buffer.erase(0, 5 + size_t(n));
  return protocol::Result<std::string>(std::move(payload));
}

protocol::Result<KeepAliveAnswer> decode_keep_alive_response(std::string_view in) {
  KeepAliveAnswer a;
  auto bad = [&](const char* what) {
    return make_error(ErrorCode::malformed_body, std::string("LeaseKeepAliveResponse: ") + what);
  };
  for (size_t pos = 0; pos < in.size();) {
    auto key = get_varint(in, pos);
    if (!key) return bad("truncated field key");
    const uint64_t field = *key >> 3;
    switch (*key & 7) {
      case 0: {  // varint
        auto v = get_varint(in, pos);
        if (!v) return bad("truncated varint");
        if (field == 2) a.id = int64_t(*v);
        if (field == 3) a.ttl = int64_t(*v);
        break;
      }
      case 1:  // 64-bit
        if (in.size() - pos < 8) return bad("truncated 64-bit field");
        pos += 8;
        break;
      case 2: {  // length-delimited (the header)
        auto len = get_varint(in, pos);
        if (!len || *len > in.size() - pos) return bad("truncated length-delimited field");
        pos += size_t(*len);
        break;
      }
      case 5:  // 32-bit
        if (in.size() - pos < 4) return bad("truncated 32-bit field");
        pos += 4;
        break;
      default:
        return bad("unknown wire type");
    }
  }
  return a;
}

}  // namespace epd::etcd::detail
