// Host-side tests of the rdma backend's pure parts (no device needed): the handshake wire format, GID
// ranking, the work-completion error table, and "no devices => rdma not offered, the rest still works".
#include <infiniband/verbs.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "device.hpp"
#include "epd/transport/engine.hpp"
#include "handshake.hpp"
#include "qp.hpp"

using namespace epd::transport;
using namespace epd::transport::rdma;

namespace {

Hello sample_request() {
  Hello h;
  h.kind = HelloKind::request;
  h.mtu = IBV_MTU_4096;
  h.lid = 0x1234;
  for (int i = 0; i < 16; ++i) h.gid[i] = uint8_t(i * 7);
  h.target_incarnation = 0x0102030405060708;
  h.target_token = 0xfffefdfcfbfaf9f8;
  h.qps = {{0x11, 0xabcdef}, {0x12, 0x1}};
  return h;
}

bool has_rdma_device() {
  int n = 0;
  ibv_device** l = ibv_get_device_list(&n);
  if (l) ibv_free_device_list(l);
  return l && n > 0;
}

}  // namespace

TEST_CASE("rdma handshake: byte layout and round trip", "[rdma][unit]") {
  const Hello h = sample_request();
  const auto b = encode_hello(h);
  REQUIRE(b.size() == kHelloFixedBytes + 16);
  CHECK(std::string(b.begin(), b.begin() + 4) == "EPDR");
  CHECK(b[4] == 1);                 // version
  CHECK(b[5] == 1);                 // request
  CHECK((b[6] == 0 && b[7] == 2));  // qp_count, big-endian
  CHECK(b[8] == IBV_MTU_4096);
  CHECK(b[9] == 0);
  CHECK((b[10] == 0x12 && b[11] == 0x34));  // lid
  CHECK(b[12 + 15] == 15 * 7);              // gid
  CHECK(b[28] == 0x01);
  CHECK(b[36] == 0xff);
  CHECK((b[44] == 0 && b[47] == 0x11 && b[49] == 0xab && b[51] == 0xef));  // qpn, psn of qp 0
  auto back = decode_hello(b);
  REQUIRE(back.ok());
  CHECK(*back == h);
}

TEST_CASE("rdma handshake: malformed input is refused", "[rdma][unit]") {
  const auto good = encode_hello(sample_request());
  auto mutate = [&](size_t at, uint8_t v) {
    auto b = good;
    b[at] = v;
    return decode_hello(b);
  };
  CHECK_FALSE(mutate(0, 'X').ok());  // magic
  CHECK_FALSE(mutate(4, 2).ok());    // version
  CHECK_FALSE(mutate(5, 9).ok());    // kind
  CHECK_FALSE(mutate(7, 3).ok());    // count disagrees with the length
  CHECK_FALSE(mutate(6, 1).ok());    // 258 qps: over the limit
  CHECK_FALSE(mutate(8, 0).ok());    // mtu
  CHECK_FALSE(mutate(9, 77).ok());   // reject reason
  auto trailing = good;
  trailing.push_back(0);
  CHECK_FALSE(decode_hello(trailing).ok());
  CHECK_FALSE(decode_hello(std::span(good).first(good.size() - 1)).ok());
  CHECK_FALSE(decode_hello(std::span(good).first(10)).ok());
  Hello none = sample_request();
  none.qps.clear();
  CHECK_FALSE(decode_hello(encode_hello(none)).ok());  // a request without QPs
  Hello reject;
  reject.kind = HelloKind::reject;
  reject.reason = HandshakeReject::bad_token;
  auto r = decode_hello(encode_hello(reject));
  REQUIRE(r.ok());
  CHECK(r->reason == HandshakeReject::bad_token);
}

TEST_CASE("rdma grant query: byte layout, round trip over a socket, malformed input", "[rdma][unit]") {
  const auto q = encode_grant_query(0x0102030405060708ull);
  REQUIRE(q.size() == kGrantQueryBytes);
  CHECK(std::string(q.begin(), q.begin() + 4) == "EPDG");
  CHECK(q[4] == 0x01);
  CHECK(q[11] == 0x08);
  auto key = decode_grant_query(q);
  REQUIRE(key.ok());
  CHECK(*key == 0x0102030405060708ull);
  auto bad = q;
  bad[0] = 'X';
  CHECK_FALSE(decode_grant_query(bad).ok());
  CHECK_FALSE(decode_grant_query(std::span(q).first(11)).ok());

  const std::vector<GrantRun> runs{{0x7f0000001000, 65536, 0x1234}, {0x7f0000100000, 4096, 0xabcdef}};
  const auto reply = encode_grant_reply(runs);
  CHECK(reply.size() == 8 + 20 * runs.size());
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  REQUIRE(write_all(sv[0], reply, deadline).ok());
  REQUIRE(write_all(sv[0], encode_grant_reply({}), deadline).ok());  // "no such grant"
  auto got = read_grant_reply(sv[1], deadline);
  REQUIRE(got.ok());
  CHECK(*got == runs);
  auto none = read_grant_reply(sv[1], deadline);
  REQUIRE(none.ok());
  CHECK(none->empty());
  ::close(sv[0]);
  ::close(sv[1]);
}

TEST_CASE("rdma GID choice: RoCE v2 IPv4-mapped of the configured address first", "[rdma][unit]") {
  auto v4 = [](uint8_t last) {
    Gid g{};
    g[10] = g[11] = 0xff;
    g[12] = 10, g[13] = 0, g[14] = 0, g[15] = last;
    return g;
  };
  Gid link_local{};
  link_local[0] = 0xfe, link_local[1] = 0x80, link_local[15] = 1;
  std::vector<GidCandidate> c = {
      {0, IBV_GID_TYPE_ROCE_V1, link_local}, {1, IBV_GID_TYPE_ROCE_V2, link_local},
      {2, IBV_GID_TYPE_ROCE_V1, v4(5)},      {3, IBV_GID_TYPE_ROCE_V2, v4(5)},
      {4, IBV_GID_TYPE_ROCE_V2, v4(9)},
  };
  CHECK(choose_gid(c, std::array<uint8_t, 4>{10, 0, 0, 9}) == 4);
  CHECK(choose_gid(c, std::nullopt) == 3);  // lowest index among equals
  CHECK(choose_gid(std::span(c).first(3), std::nullopt) == 1);
  CHECK(choose_gid(std::span(c).first(1), std::nullopt) == 0);
  CHECK(choose_gid({}, std::nullopt) == -1);
  CHECK(is_ipv4_mapped(v4(1)));
  CHECK_FALSE(is_ipv4_mapped(link_local));
  CHECK(gid_to_string(v4(9)) == "::ffff:10.0.0.9");
  CHECK(gid_score({0, IBV_GID_TYPE_ROCE_V2, Gid{}}, std::nullopt) < 0);  // empty slot
}

TEST_CASE("rdma work-completion statuses map onto the error table", "[rdma][unit]") {
  CHECK(map_wc_status(IBV_WC_RETRY_EXC_ERR, false, "x").code == ErrorCode::peer_died);
  CHECK(map_wc_status(IBV_WC_RNR_RETRY_EXC_ERR, false, "x").code == ErrorCode::peer_died);
  CHECK(map_wc_status(IBV_WC_REM_ACCESS_ERR, false, "x").code == ErrorCode::remote_access);
  CHECK(map_wc_status(IBV_WC_REM_INV_REQ_ERR, false, "x").code == ErrorCode::remote_access);
  CHECK(map_wc_status(IBV_WC_WR_FLUSH_ERR, true, "x").code == ErrorCode::session_closed);
  CHECK(map_wc_status(IBV_WC_WR_FLUSH_ERR, false, "x").code == ErrorCode::transfer_failed);
  CHECK(map_wc_status(IBV_WC_RESP_TIMEOUT_ERR, false, "x").code == ErrorCode::timeout);
  CHECK(map_wc_status(IBV_WC_REM_OP_ERR, false, "x").code == ErrorCode::transfer_failed);
  CHECK(map_wc_status(IBV_WC_FATAL_ERR, false, "x").retryable);
  for (auto s : {IBV_WC_LOC_LEN_ERR, IBV_WC_LOC_QP_OP_ERR, IBV_WC_LOC_PROT_ERR, IBV_WC_LOC_ACCESS_ERR}) {
    const auto e = map_wc_status(s, false, "x");
    CHECK(e.code == ErrorCode::transfer_failed);
    CHECK_FALSE(e.retryable);  // a local bug: reconnecting would not help
  }
  CHECK(map_wc_status(IBV_WC_RETRY_EXC_ERR, false, "rdma link to p").detail.find("rdma link to p") == 0);
}

TEST_CASE("rdma without devices: not offered, everything else works", "[rdma][unit]") {
  if (has_rdma_device()) {
    WARN("this machine has RDMA devices: the no-device path is not exercised here");
    return;
  }
  EngineConfig config;
  config.offer = {"tcp", "rdma"};
  auto engine = Engine::create(config);
  REQUIRE(engine.ok());
  const auto offered = (*engine)->offered();
  CHECK(std::find(offered.begin(), offered.end(), "rdma") == offered.end());
  CHECK(std::find(offered.begin(), offered.end(), "tcp") != offered.end());
  CHECK_FALSE((*engine)->descriptor().backends.count("rdma"));
  REQUIRE((*engine)->allocate("r", 4096).ok());
}
