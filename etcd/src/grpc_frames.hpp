#pragma once
// The bytes of etcd's LeaseKeepAlive over gRPC, with no I/O: the length-prefixed messages of a gRPC stream
// and the two protobuf messages a renewal needs (etcd's rpc.proto: LeaseKeepAliveRequest { int64 ID = 1; },
// LeaseKeepAliveResponse { ResponseHeader header = 1; int64 ID = 2; int64 TTL = 3; }). Two integer fields
// do not need protoc and a generated library.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "epd/protocol/result.hpp"

namespace epd::etcd::detail {

inline constexpr std::string_view kLeaseKeepAlivePath = "/etcdserverpb.Lease/LeaseKeepAlive";
// A renewal's answer is a few dozen bytes; anything near this is not one.
inline constexpr uint32_t kMaxGrpcMessage = 64 * 1024;

std::string encode_keep_alive_request(int64_t lease);

// One message of a gRPC stream: a flag byte (0: not compressed), the length (4 bytes, big-endian), the bytes.
std::string grpc_message(std::string_view payload);
// Takes the first whole message off the front of `buffer`; nullopt while it is incomplete. An error for a
// compressed message (we offer no compression) or one longer than kMaxGrpcMessage.
std::optional<protocol::Result<std::string>> take_grpc_message(std::string& buffer);

struct KeepAliveAnswer {
  int64_t id = 0;
  int64_t ttl = 0;  // 0 (or absent): etcd no longer knows the lease
};
// Unknown fields are skipped, as protobuf requires; a truncated or malformed message is an error.
protocol::Result<KeepAliveAnswer> decode_keep_alive_response(std::string_view bytes);

}  // namespace epd::etcd::detail
