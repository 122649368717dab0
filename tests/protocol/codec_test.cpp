#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>

#include "epd/protocol/codec.hpp"
#include "sample_messages.hpp"

using namespace epd::protocol;
using epd::protocol::testing::for_each_message_type;
using epd::protocol::testing::sample;

namespace {

std::vector<uint8_t> frame_of(MessageType type, const std::vector<uint8_t>& body, uint8_t version = 1,
                              std::string sender = "peer-1") {
  std::vector<uint8_t> f = {'E', 'P', 'D', '1', version, 0, uint8_t(uint16_t(type) >> 8), uint8_t(type)};
  for (int i = 0; i < 8; ++i) f.push_back(0);
  f.push_back(uint8_t(sender.size()));
  f.insert(f.end(), sender.begin(), sender.end());
  f.insert(f.end(), body.begin(), body.end());
  return f;
}

// msgpack for a map given as pre-packed pieces.
template <class Fn>
std::vector<uint8_t> pack(Fn fn) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  fn(pk);
  return {reinterpret_cast<const uint8_t*>(buf.data()),
          reinterpret_cast<const uint8_t*>(buf.data()) + buf.size()};
}

Error decode_error(const std::vector<uint8_t>& frame, const CodecLimits& limits = {}) {
  auto r = decode(frame, limits);
  REQUIRE_FALSE(r.ok());
  return r.error();
}

}  // namespace

TEST_CASE("every message type round-trips with every field set", "[protocol][codec]") {
  int types = 0;
  for_each_message_type([&](auto tag) {
    using T = decltype(tag);
    const T msg = sample<T>(static_cast<uint32_t>(T::kType));
    Envelope env{"prefill-0", 0x0102030405060708ull, msg};
    const auto bytes = encode(env);
    auto back = decode(bytes);
    INFO(type_name(T::kType));
    REQUIRE(back.ok());
    CHECK(back->sender == "prefill-0");
    CHECK(back->incarnation == 0x0102030405060708ull);
    CHECK(back->type() == T::kType);
    REQUIRE(std::holds_alternative<T>(back->body));
    CHECK(std::get<T>(back->body) == msg);
    CHECK_FALSE(std::get<T>(back->body) == T{});  // the sample really set fields
    CHECK(type_name(T::kType) == T::kName);       // the name table is the structs' own names
    CHECK(is_known_type(uint64_t(T::kType)));
    ++types;
  });
  CHECK(types == int(std::variant_size_v<Body>));
}

TEST_CASE("float fields round-trip exactly and accept any msgpack number that fits", "[protocol][codec]") {
  Submit s;
  s.room = 7;
  s.request_id = "req-42";
  s.temperature = 0.8f;  // not exact in binary: the float's own bits must come back
  s.top_p = 0.9f;
  s.top_k = 40;
  s.seed = ~uint64_t{0};
  auto back = decode(encode(Envelope{"router", 1, s}));
  REQUIRE(back.ok());
  CHECK(std::get<Submit>(back->body) == s);

  // Another writer may send a float64 or an integer for a float field.
  auto submit_with = [](auto&& temperature) {
    return frame_of(MessageType::submit, pack([&](auto& pk) {
                      pk.pack_map(2);
                      pk.pack("room");
                      pk.pack(uint64_t{1});
                      pk.pack("temperature");
                      pk.pack(temperature);
                    }));
  };
  auto as_double = decode(submit_with(0.8));
  REQUIRE(as_double.ok());
  CHECK(std::get<Submit>(as_double->body).temperature == 0.8f);
  auto as_int = decode(submit_with(uint64_t{2}));
  REQUIRE(as_int.ok());
  CHECK(std::get<Submit>(as_int->body).temperature == 2.0f);
  // A double a float cannot hold is refused, naming the field (NaN and inf decode; roles validate them).
  const auto e = decode_error(submit_with(1e300));
  CHECK(e.code == ErrorCode::bad_field_type);
  CHECK_THAT(e.detail, Catch::Contains("temperature"));
  auto nan = decode(submit_with(std::numeric_limits<double>::quiet_NaN()));
  REQUIRE(nan.ok());
  CHECK(std::isnan(std::get<Submit>(nan->body).temperature));
}

TEST_CASE("a SUBMIT from a peer without the sampling keys decodes as greedy, no request id",
          "[protocol][codec]") {
  auto body = pack([](auto& pk) {
    pk.pack_map(3);
    pk.pack("room");
    pk.pack(uint64_t{9});
    pk.pack("max_tokens");
    pk.pack(uint32_t{4});
    pk.pack("prefill");
    pk.pack("prefill-0");
  });
  auto env = decode(frame_of(MessageType::submit, body));
  REQUIRE(env.ok());
  const auto& s = std::get<Submit>(env->body);
  CHECK(s.room == 9);
  CHECK(s.request_id.empty());
  CHECK(s.temperature == 0.0f);
  CHECK(s.top_p == 1.0f);
  CHECK(s.top_k == 0);
  CHECK(s.seed == 0);
}

TEST_CASE("header layout is byte-exact", "[protocol][codec]") {
  const auto bytes = encode(Envelope{"d0", 0xAABBCCDDEEFF0011ull, Heartbeat{.seq = 5}});
  REQUIRE(bytes.size() > 19);
  CHECK(std::memcmp(bytes.data(), "EPD1", 4) == 0);
  CHECK(bytes[4] == kProtocolVersion);
  CHECK(bytes[5] == 0);
  CHECK(((bytes[6] << 8) | bytes[7]) == int(MessageType::heartbeat));
  CHECK(bytes[8] == 0xAA);
  CHECK(bytes[15] == 0x11);
  CHECK(bytes[16] == 2);
  CHECK(bytes[17] == 'd');
  CHECK(bytes[18] == '0');
}

TEST_CASE("standalone structs round-trip (segment descriptor, KV layout)", "[protocol][codec]") {
  const auto seg = sample<SegmentDescriptor>(9);
  auto back = decode_value<SegmentDescriptor>(encode_value(seg));
  REQUIRE(back.ok());
  CHECK(*back == seg);
  const auto layout = sample<KvLayout>(3);
  auto l2 = decode_value<KvLayout>(encode_value(layout));
  REQUIRE(l2.ok());
  CHECK(*l2 == layout);
}

TEST_CASE("decoder rejects bad envelopes with typed errors", "[protocol][codec]") {
  const auto good = encode(Envelope{"p0", 1, Bootstrap{.room = 7, .dst_pages = {1, 2}, .aux_slot = 3}});
  REQUIRE(decode(good).ok());

  SECTION("wrong magic") {
    auto f = good;
    f[0] = 'X';
    CHECK(decode_error(f).code == ErrorCode::bad_magic);
  }
  SECTION("unknown version names both versions") {
    auto f = good;
    f[4] = 2;
    const auto e = decode_error(f);
    CHECK(e.code == ErrorCode::unsupported_version);
    CHECK(e.detail == "version 2 not supported, speak 1");
  }
  SECTION("unknown type") {
    auto f = good;
    f[6] = 0x7f;
    CHECK(decode_error(f).code == ErrorCode::unknown_type);
  }
  SECTION("reserved flags") {
    auto f = good;
    f[5] = 1;
    CHECK(decode_error(f).code == ErrorCode::bad_header);
  }
  SECTION("truncated header and sender") {
    CHECK(decode_error(std::vector<uint8_t>(good.begin(), good.begin() + 10)).code == ErrorCode::bad_header);
    CHECK(decode_error(std::vector<uint8_t>(good.begin(), good.begin() + 18)).code == ErrorCode::bad_header);
  }
  SECTION("empty and non-printable sender id") {
    CHECK(decode_error(frame_of(MessageType::goodbye, pack([](auto& pk) { pk.pack_map(0); }), 1, "")).code ==
          ErrorCode::bad_header);
    CHECK(decode_error(frame_of(MessageType::goodbye, pack([](auto& pk) { pk.pack_map(0); }), 1, "a\nb"))
              .code == ErrorCode::bad_header);
  }
  SECTION("trailing bytes") {
    auto f = good;
    f.push_back(0xc0);
    CHECK(decode_error(f).code == ErrorCode::trailing_bytes);
  }
  SECTION("missing body") {
    auto f = frame_of(MessageType::heartbeat, {});
    CHECK(decode_error(f).code == ErrorCode::malformed_body);
  }
  SECTION("oversize frame") {
    CodecLimits small;
    small.max_frame_bytes = 16;
    CHECK(decode_error(good, small).code == ErrorCode::frame_too_large);
  }
}

// Found by fuzz/fuzz_codec: msgpack allocates for every element a header declares before reading one, so 22
// bytes declaring a million-element array made each decode allocate 24 MB. A count the remaining bytes cannot
// hold is refused from the header (fuzz/regressions/codec keeps the input).
TEST_CASE("a short body declaring a huge array or map is refused from its header", "[protocol][codec]") {
  const std::vector<uint8_t> huge_array = {0xdd, 0x00, 0x0f, 0xff, 0xff};                 // array32, 1M - 1
  const std::vector<uint8_t> huge_map = {0x81, 0xa1, 'a', 0xdf, 0x00, 0x00, 0x00, 0x40};  // {a: map32 of 64}
  for (const auto& body : {huge_array, huge_map}) {
    const auto e = decode_error(frame_of(MessageType::bootstrap, body));
    CHECK(e.code == ErrorCode::malformed_body);
    CHECK_THAT(e.detail, Catch::Contains("size overflow"));
  }
  // A count the bytes do hold still decodes: an array of 200 one-byte pages.
  Bootstrap b{.room = 1, .dst_pages = std::vector<uint32_t>(200, 5), .aux_slot = 0};
  auto ok = decode(encode(Envelope{"p0", 1, b}));
  REQUIRE(ok.ok());
  CHECK(std::get<Bootstrap>(ok->body).dst_pages.size() == 200);
}

TEST_CASE("decoder rejects bad bodies with the field named", "[protocol][codec]") {
  SECTION("missing required field") {
    auto body = pack([](auto& pk) {
      pk.pack_map(1);
      pk.pack("room");
      pk.pack(uint64_t{5});
    });
    const auto e = decode_error(frame_of(MessageType::bootstrap, body));
    CHECK(e.code == ErrorCode::missing_field);
    CHECK_THAT(e.detail, Catch::Contains("dst_pages"));
  }
  SECTION("enum out of range") {
    auto body = pack([](auto& pk) {
      pk.pack_map(2);
      pk.pack("room");
      pk.pack(uint64_t{5});
      pk.pack("state");
      pk.pack(uint64_t{99});
    });
    const auto e = decode_error(frame_of(MessageType::kv_status, body));
    CHECK(e.code == ErrorCode::enum_out_of_range);
    CHECK_THAT(e.detail, Catch::Contains("state"));
  }
  SECTION("error code out of range") {
    auto body = pack([](auto& pk) {
      pk.pack_map(1);
      pk.pack("code");
      pk.pack(uint64_t{999});
    });
    CHECK(decode_error(frame_of(MessageType::error, body)).code == ErrorCode::enum_out_of_range);
  }
  SECTION("wrong field type") {
    auto body = pack([](auto& pk) {
      pk.pack_map(1);
      pk.pack("seq");
      pk.pack("not a number");
    });
    CHECK(decode_error(frame_of(MessageType::heartbeat, body)).code == ErrorCode::bad_field_type);
  }
  SECTION("integer that does not fit the field") {
    auto body = pack([](auto& pk) {
      pk.pack_map(3);
      pk.pack("room");
      pk.pack(uint64_t{1});
      pk.pack("dst_pages");
      pk.pack_array(1);
      pk.pack(uint64_t{1} << 40);
      pk.pack("aux_slot");
      pk.pack(uint64_t{0});
    });
    const auto e = decode_error(frame_of(MessageType::bootstrap, body));
    CHECK(e.code == ErrorCode::bad_field_type);
    CHECK_THAT(e.detail, Catch::Contains("dst_pages"));
  }
  SECTION("body that is not a map") {
    auto body = pack([](auto& pk) { pk.pack(uint64_t{1}); });
    CHECK(decode_error(frame_of(MessageType::heartbeat, body)).code == ErrorCode::bad_field_type);
  }
  SECTION("hostile array32 header does not allocate: limit error") {
    // array32 claiming 2^32-1 elements, then nothing.
    std::vector<uint8_t> body = {0x81, 0xa9, 'd', 's',  't',  '_',  'p',  'a',
                                 'g',  'e',  's', 0xdd, 0xff, 0xff, 0xff, 0xff};
    CHECK(decode_error(frame_of(MessageType::bootstrap, body)).code == ErrorCode::malformed_body);
  }
  SECTION("nesting deeper than the limit") {
    std::vector<uint8_t> body(64, 0x91);  // 64 nested one-element arrays
    body.push_back(0x01);
    CHECK(decode_error(frame_of(MessageType::heartbeat, body)).code == ErrorCode::malformed_body);
  }
  SECTION("unknown keys are ignored") {
    auto body = pack([](auto& pk) {
      pk.pack_map(2);
      pk.pack("seq");
      pk.pack(uint64_t{3});
      pk.pack("future_field");
      pk.pack("whatever");
    });
    auto r = decode(frame_of(MessageType::heartbeat, body));
    REQUIRE(r.ok());
    CHECK(std::get<Heartbeat>(r->body).seq == 3);
  }
}

TEST_CASE("logprobs: a SUBMIT without the keys asks for none, and logprobs_fit checks the flattened shape",
          "[protocol][codec][logprobs]") {
  auto env = decode(frame_of(MessageType::submit, pack([](auto& pk) {
                               pk.pack_map(1);
                               pk.pack("room");
                               pk.pack(uint64_t{9});
                             })));
  REQUIRE(env.ok());
  CHECK_FALSE(std::get<Submit>(env->body).logprobs);
  CHECK(std::get<Submit>(env->body).top_logprobs == 0);

  Logprobs l;
  CHECK(logprobs_fit(l, 0, 20));
  CHECK_FALSE(logprobs_fit(l, 1, 20));  // a token without its logprob
  l.chosen = {-0.5f, -1.5f};
  l.top = 2;
  l.top_ids = {1, 2, 3, 4};
  l.top_values = {-0.5f, -1.0f, -1.5f, -2.0f};
  CHECK(logprobs_fit(l, 2, 20));
  CHECK_FALSE(logprobs_fit(l, 2, 1));  // more alternatives than asked for
  CHECK_FALSE(logprobs_fit(l, 3, 20));
  l.top_values.pop_back();
  CHECK_FALSE(logprobs_fit(l, 2, 20));

  // TOKENS carries them through the codec unchanged, floats bit for bit.
  l.top_values.push_back(-1e-7f);
  Tokens t{.room = 3, .index = 4, .tokens = {5, 6}, .logprobs = l};
  auto back = decode(encode(Envelope{"decode-0", 1, t}));
  REQUIRE(back.ok());
  CHECK(std::get<Tokens>(back->body) == t);

  // Not asked for: no key on the wire (a TOKENS per token costs nothing more), and none decodes as none.
  const Tokens plain{.room = 3, .index = 4, .tokens = {5, 6}};
  const auto bytes = encode(Envelope{"decode-0", 1, plain});
  CHECK(std::string(bytes.begin(), bytes.end()).find("logprobs") == std::string::npos);
  auto none = decode(bytes);
  REQUIRE(none.ok());
  CHECK_FALSE(std::get<Tokens>(none->body).logprobs.has_value());
}
