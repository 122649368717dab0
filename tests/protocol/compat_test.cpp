// Which builds may work together: the rule both sides of a HELLO apply, and the identity on the wire.
#include <catch2/catch.hpp>

#include "epd/protocol/codec.hpp"
#include "epd/protocol/compat.hpp"

using namespace epd::protocol;

namespace {

BuildIdentity build(uint32_t oldest, uint32_t newest, std::string digest = "ab12cd34ef56ab12") {
  BuildIdentity id;
  id.protocol_oldest = oldest;
  id.protocol = newest;
  id.build = "g" + std::to_string(newest);
  id.model_name = "tiny";
  id.model_digest = std::move(digest);
  return id;
}

}  // namespace

TEST_CASE("compat: builds work together when their revision ranges overlap, and both sides agree") {
  const auto ok = [](const BuildIdentity& a, const BuildIdentity& b) {
    const bool ab = !incompatibility("a", a, "b", b);
    CHECK(ab == !incompatibility("b", b, "a", a));  // symmetric
    return ab;
  };
  CHECK(ok(build(4, 4), build(4, 4)));
  CHECK(ok(build(4, 5), build(4, 4)));  // a newer build that still speaks 4
  CHECK(ok(build(3, 4), build(4, 6)));
  CHECK_FALSE(ok(build(3, 3), build(4, 4)));      // an older build
  CHECK_FALSE(ok(build(5, 6), build(4, 4)));      // a newer build that dropped 4
  CHECK_FALSE(ok(BuildIdentity{}, build(4, 4)));  // a build before revision 4 says nothing
  // An inverted range is read as its newest revision alone.
  CHECK_FALSE(ok(build(9, 3), build(4, 4)));
}

TEST_CASE("compat: the refusal names both sides' values") {
  auto bad = incompatibility("router", build(4, 4), "prefill-9", build(3, 3));
  REQUIRE(bad);
  CHECK(bad->kind == Incompatibility::Kind::protocol);
  CHECK(std::string(kind_name(bad->kind)) == "protocol");
  CHECK(bad->reason ==
        "'prefill-9' speaks revision 3 (build g3), 'router' revision 4 (build g4): no protocol revision in "
        "common");
  bad = incompatibility("router", build(4, 5), "old", BuildIdentity{});
  REQUIRE(bad);
  CHECK(bad->reason.find("'old' speaks no protocol revision (a build before revision 4)") !=
        std::string::npos);
  CHECK(bad->reason.find("revisions 4..5") != std::string::npos);

  auto other = build(4, 4, "ffff00001111eeee");
  other.model_name = "bench";
  bad = incompatibility("decode-0", build(4, 4), "decode-1", other);
  REQUIRE(bad);
  CHECK(bad->kind == Incompatibility::Kind::model);
  CHECK(bad->reason ==
        "'decode-1' serves 'bench' (sha256 ffff00001111), 'decode-0' 'tiny' (sha256 ab12cd34ef56): not the "
        "same model");
}

TEST_CASE("compat: HELLO carries the identity, and a HELLO without one decodes as revision 0") {
  Hello hello;
  hello.role = "prefill";
  hello.control_endpoint = "tcp://127.0.0.1:1";
  hello.identity = build(4, 5);
  auto back = decode(encode(Envelope{"prefill-0", 7, hello}));
  REQUIRE(back);
  CHECK(std::get<Hello>(back->body) == hello);

  // What an older build sends: a HELLO body with no "identity" key at all.
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(2);
  pk.pack(std::string("role"));
  pk.pack(std::string("prefill"));
  pk.pack(std::string("control_endpoint"));
  pk.pack(std::string("tcp://127.0.0.1:1"));
  auto old = decode_value<Hello>({reinterpret_cast<const uint8_t*>(buf.data()), buf.size()});
  REQUIRE(old);
  CHECK(old->identity.protocol == 0);
  CHECK(incompatibility("router", current_protocol_identity(), "prefill-0", old->identity));
}
