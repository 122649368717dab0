// The bytes of a lease renewal over gRPC, with no etcd: protobuf's own worked example for the request, the
// stream's length prefixes, and answers that are truncated, hostile or carry fields we do not read.
#include <catch2/catch.hpp>

#include <string>

#include "grpc_frames.hpp"

using namespace epd::etcd::detail;
using epd::protocol::ErrorCode;

namespace {
std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int c : b) s.push_back(char(c));
  return s;
}
}  // namespace

TEST_CASE("grpc frames: a keep-alive request is field 1 as a varint, in a length-prefixed message") {
  CHECK(encode_keep_alive_request(150) == bytes({0x08, 0x96, 0x01}));  // protobuf's encoding guide
  CHECK(encode_keep_alive_request(1) == bytes({0x08, 0x01}));
  CHECK(grpc_message(bytes({0x08, 0x01})) == bytes({0, 0, 0, 0, 2, 0x08, 0x01}));
}

TEST_CASE("grpc frames: messages are taken whole, one at a time, and hostile prefixes are refused") {
  std::string buf = grpc_message("ab") + grpc_message("") + grpc_message("cde").substr(0, 6);
  auto first = take_grpc_message(buf);
  REQUIRE(first);
  REQUIRE(*first);
  CHECK(**first == "ab");
  auto empty = take_grpc_message(buf);
  REQUIRE(empty);
  REQUIRE(*empty);
  CHECK((*empty)->empty());
  CHECK_FALSE(take_grpc_message(buf));  // 1 of "cde" arrived: wait for the rest
  buf += "de";
  CHECK(**take_grpc_message(buf) == "cde");
  CHECK(buf.empty());

  std::string huge = bytes({0, 0x7f, 0xff, 0xff, 0xff});
  auto refused = take_grpc_message(huge);
  REQUIRE(refused);
  REQUIRE_FALSE(*refused);
  CHECK(refused->error().code == ErrorCode::malformed_body);
  std::string compressed = bytes({1, 0, 0, 0, 1, 0x08});
  auto c = take_grpc_message(compressed);
  REQUIRE(c);
  CHECK_FALSE(*c);
}

TEST_CASE(
    "grpc frames: a keep-alive answer gives its lease and TTL and skips the header and unknown fields") {
  // header {cluster_id: 1, member_id: 2}, ID 150, TTL 5, then a fixed64 and a fixed32 field of a later etcd.
  const std::string answer = bytes({0x0a, 0x04, 0x08, 0x01, 0x10, 0x02, 0x10, 0x96, 0x01, 0x18, 0x05, 0x49, 1,
                                    2,    3,    4,    5,    6,    7,    8,    0x55, 1,    2,    3,    4});
  auto a = decode_keep_alive_response(answer);
  REQUIRE(a);
  CHECK(a->id == 150);
  CHECK(a->ttl == 5);
  // No TTL: the lease is gone (proto3 leaves zeros out).
  auto gone = decode_keep_alive_response(bytes({0x10, 0x96, 0x01}));
  REQUIRE(gone);
  CHECK(gone->ttl == 0);
  // A negative int64 takes ten bytes.
  auto negative =
      decode_keep_alive_response(bytes({0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}));
  REQUIRE(negative);
  CHECK(negative->ttl == -1);
  // Every cut of the answer inside a field is an error, never a read past its end.
  for (size_t cut : {1u, 3u, 5u, 7u, 8u, 10u, 12u, 19u, 21u, 24u}) {
    auto r = decode_keep_alive_response(std::string_view(answer).substr(0, cut));
    INFO("cut at " << cut);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == ErrorCode::malformed_body);
  }
  CHECK_FALSE(decode_keep_alive_response(bytes({0x0b})));  // wire type 3 (a group): not protobuf 3
  CHECK_FALSE(decode_keep_alive_response(
      bytes({0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})));  // an 11-byte varint
}
