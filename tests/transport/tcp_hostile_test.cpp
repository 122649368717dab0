// Hostile bytes straight at a tcp listener: every bad frame is refused, nothing outside a region is written,
// and the listener keeps serving; small frames cut at any byte still land.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "epd/transport/backend_info.hpp"
#include "tcp/tcp_info.hpp"
#include "tcp/wire.hpp"
#include "test_util.hpp"

using namespace epd::test;
using namespace epd::transport::tcp;
using namespace std::chrono_literals;

namespace {

int connect_raw(const std::string& endpoint) {
  const auto colon = endpoint.rfind(':');
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::stoi(endpoint.substr(colon + 1))));
  inet_pton(AF_INET, endpoint.substr(0, colon).c_str(), &sa.sin_addr);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{5, 0};  // every read below is bounded
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

void send_all(int fd, const void* p, size_t n) {
  REQUIRE(send(fd, p, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n));
}

void send_frame(int fd, uint64_t seq, uint64_t token, uint64_t addr, uint64_t len,
                const std::vector<uint8_t>& payload) {
  WriteHeader h;
  h.seq = seq;
  h.token = token;
  h.addr = addr;
  h.len = len;
  send_all(fd, &h, sizeof(h));
  if (!payload.empty()) send_all(fd, payload.data(), payload.size());
}

Reply read_reply(int fd) {
  Reply r{};
  r.magic = 0;
  REQUIRE(recv(fd, &r, sizeof(r), MSG_WAITALL) == static_cast<ssize_t>(sizeof(r)));
  CHECK(r.magic == kReplyMagic);
  return r;
}

bool closed_by_peer(int fd) {
  char c;
  return recv(fd, &c, 1, 0) == 0;
}

}  // namespace

TEST_CASE("tcp listener refuses hostile frames and survives", "[tcp][hostile]") {
  LocalTarget target("tcp", 2, 1 << 16);
  REQUIRE(target.ok());
  const auto& d = target.descriptor();
  const auto info = decode_info<TcpInfo>(d, kName);
  REQUIRE(info);
  const std::string endpoint = info->endpoint;
  const auto& r0 = d.regions[0];
  REQUIRE(target.fill(r0.base, r0.length, 0x11));
  REQUIRE(target.fill(d.regions[1].base, d.regions[1].length, 0x22));
  const uint64_t sum0 = *target.checksum(r0.base, r0.length);
  const uint64_t sum1 = *target.checksum(d.regions[1].base, d.regions[1].length);
  const std::vector<uint8_t> payload(16, 0xEE);

  SECTION("refused frames are drained and nacked; the connection stays usable") {
    const int fd = connect_raw(endpoint);
    REQUIRE(fd >= 0);
    send_frame(fd, 1, d.token, r0.base + r0.length - 8, 16, payload);  // past the end
    Reply r = read_reply(fd);
    CHECK(r.type == kTypeNack);
    CHECK(r.seq == 1);
    CHECK(r.code == static_cast<uint16_t>(ErrorCode::out_of_range));
    send_frame(fd, 2, d.token ^ 1, r0.base, 16, payload);  // wrong token
    r = read_reply(fd);
    CHECK(r.type == kTypeNack);
    CHECK(r.code == static_cast<uint16_t>(ErrorCode::bad_token));
    send_frame(fd, 3, d.token, ~0ull - 4, 16, payload);  // address wraps
    r = read_reply(fd);
    CHECK(r.code == static_cast<uint16_t>(ErrorCode::out_of_range));
    send_frame(fd, 4, d.token, 4096, 16, payload);  // an address that is no region at all
    r = read_reply(fd);
    CHECK(r.code == static_cast<uint16_t>(ErrorCode::out_of_range));
    CHECK(*target.checksum(r0.base, r0.length) == sum0);
    // Still framed: a valid write lands and is acked.
    send_frame(fd, 5, d.token, r0.base + 100, 16, payload);
    r = read_reply(fd);
    CHECK(r.type == kTypeAck);
    CHECK(r.seq == 5);
    CHECK(reinterpret_cast<const uint8_t*>(r0.base)[100] == 0xEE);
    CHECK(reinterpret_cast<const uint8_t*>(r0.base)[116] == 0x11);
    close(fd);
  }
  SECTION("a huge length is refused and the connection dropped") {
    const int fd = connect_raw(endpoint);
    REQUIRE(fd >= 0);
    send_frame(fd, 9, d.token, r0.base, ~0ull, {});
    Reply r = read_reply(fd);
    CHECK(r.type == kTypeNack);
    CHECK(r.code == static_cast<uint16_t>(ErrorCode::frame_too_large));
    CHECK(closed_by_peer(fd));
    close(fd);
    CHECK(*target.checksum(r0.base, r0.length) == sum0);
  }
  SECTION("garbage is refused and the connection dropped") {
    const int fd = connect_raw(endpoint);
    REQUIRE(fd >= 0);
    std::vector<uint8_t> junk(sizeof(WriteHeader));
    fill_random(junk.data(), junk.size(), 7);
    send_all(fd, junk.data(), junk.size());
    Reply r = read_reply(fd);
    CHECK(r.type == kTypeNack);
    CHECK(r.code == static_cast<uint16_t>(ErrorCode::bad_header));
    CHECK(closed_by_peer(fd));
    close(fd);
  }
  SECTION("small frames cut anywhere, also inside a header read ahead behind a payload, all land in order") {
    // The receiver reads a small payload and whatever of the next header has arrived in the same call.
    // Chunks of 1..97 bytes with pauses between them cut the stream at every kind of place.
    std::vector<uint8_t> stream;
    std::vector<std::pair<uint64_t, std::vector<uint8_t>>> expect;
    uint64_t at = r0.base + 1000;
    for (uint64_t seq = 1; seq <= 12; ++seq) {
      std::vector<uint8_t> body(3 + seq * 23);
      fill_random(body.data(), body.size(), seq);
      WriteHeader h;
      h.seq = seq;
      h.token = d.token;
      h.addr = at;
      h.len = body.size();
      const auto* hb = reinterpret_cast<const uint8_t*>(&h);
      stream.insert(stream.end(), hb, hb + sizeof(h));
      stream.insert(stream.end(), body.begin(), body.end());
      expect.emplace_back(at, std::move(body));
      at += 512;
    }
    const int fd = connect_raw(endpoint);
    REQUIRE(fd >= 0);
    size_t off = 0;
    for (uint64_t i = 1; off < stream.size(); ++i) {
      const size_t n = std::min<size_t>(1 + (i * 37) % 97, stream.size() - off);
      send_all(fd, stream.data() + off, n);
      off += n;
      std::this_thread::sleep_for(2ms);
    }
    uint64_t acked = 0;
    while (acked < 12) {
      const Reply r = read_reply(fd);
      REQUIRE(r.type == kTypeAck);
      REQUIRE(r.seq > acked);
      acked = r.seq;
    }
    for (const auto& [addr, body] : expect)
      CHECK(*target.checksum(addr, body.size()) == xxh(body.data(), body.size()));
    CHECK(reinterpret_cast<const uint8_t*>(r0.base)[999] == 0x11);  // nothing before the first frame
    // A garbled header right behind a small frame, in one write: read ahead or not, it is refused.
    std::vector<uint8_t> tail(sizeof(WriteHeader) + 8 + sizeof(WriteHeader));
    WriteHeader h;
    h.seq = 13;
    h.token = d.token;
    h.addr = r0.base;
    h.len = 8;
    std::memcpy(tail.data(), &h, sizeof(h));
    std::memset(tail.data() + sizeof(h), 0x5A, 8);
    fill_random(tail.data() + sizeof(h) + 8, sizeof(WriteHeader), 9);
    send_all(fd, tail.data(), tail.size());
    Reply r = read_reply(fd);
    if (r.type == kTypeAck) r = read_reply(fd);  // the ack of seq 13 may come first
    CHECK(r.type == kTypeNack);
    CHECK(r.code == static_cast<uint16_t>(ErrorCode::bad_header));
    CHECK(closed_by_peer(fd));
    CHECK(reinterpret_cast<const uint8_t*>(r0.base)[0] == 0x5A);
    close(fd);
  }
  SECTION("a sender that vanishes mid-payload or mid-header leaves the listener serving") {
    for (size_t cut : {size_t{7}, sizeof(WriteHeader) + 5}) {
      const int fd = connect_raw(endpoint);
      REQUIRE(fd >= 0);
      WriteHeader h;
      h.seq = 1;
      h.token = d.token;
      h.addr = d.regions[1].base;
      h.len = 1000;
      std::vector<uint8_t> bytes(sizeof(h) + 1000, 0x77);
      std::memcpy(bytes.data(), &h, sizeof(h));
      send_all(fd, bytes.data(), cut);
      close(fd);
    }
  }
  SECTION("one source may hold only a few connections that have not shown the token") {
    std::vector<int> quiet;
    for (int i = 0; i < 8; ++i) {  // ConnectionGate's default per source
      quiet.push_back(connect_raw(endpoint));
      REQUIRE(quiet.back() >= 0);
    }
    const int ninth = connect_raw(endpoint);
    REQUIRE(ninth >= 0);           // the kernel accepts it ...
    CHECK(closed_by_peer(ninth));  // ... and the receiver closes it at once
    close(ninth);
    // One of them shows the token: it is authenticated, so there is room for another stranger, and an
    // authenticated lane works as before.
    WriteHeader hello;
    hello.type = kTypeHello;
    hello.token = d.token;
    send_all(quiet[0], &hello, sizeof(hello));
    send_frame(quiet[0], 1, d.token, r0.base + 200, 16, payload);
    CHECK(read_reply(quiet[0]).type == kTypeAck);
    const int tenth = connect_raw(endpoint);
    REQUIRE(tenth >= 0);
    send_frame(tenth, 1, d.token, r0.base + 300, 16, payload);
    CHECK(read_reply(tenth).type == kTypeAck);
    // Leave only once the receiver has finished every one of them (it closes its end when its thread
    // ends): a connection the gate still counts would refuse the session below on a busy host.
    quiet.push_back(tenth);
    for (int fd : quiet) {
      shutdown(fd, SHUT_WR);
      CHECK(closed_by_peer(fd));
      close(fd);
    }
  }
  SECTION("a hello under a stale token is refused at once and gives its place back") {
    // A writer holding a descriptor from before a token rotation: each of its lanes hears bad_token on its
    // hello and is closed, and none keeps a place, so the source's whole budget is free right after.
    for (int i = 0; i < 8; ++i) {
      const int fd = connect_raw(endpoint);
      REQUIRE(fd >= 0);
      WriteHeader hello;
      hello.type = kTypeHello;
      hello.token = d.token ^ 1;
      send_all(fd, &hello, sizeof(hello));
      const Reply r = read_reply(fd);
      CHECK(r.type == kTypeNack);
      CHECK(r.seq == 0);
      CHECK(r.code == static_cast<uint16_t>(ErrorCode::bad_token));
      CHECK(closed_by_peer(fd));
      close(fd);
    }
    std::vector<int> fresh;  // 8 strangers again: every one admitted, and each then writes
    for (int i = 0; i < 8; ++i) {
      fresh.push_back(connect_raw(endpoint));
      REQUIRE(fresh.back() >= 0);
    }
    for (int fd : fresh) {
      send_frame(fd, 1, d.token, r0.base + 400, 16, payload);
      CHECK(read_reply(fd).type == kTypeAck);
      shutdown(fd, SHUT_WR);
      CHECK(closed_by_peer(fd));
      close(fd);
    }
  }
  SECTION("a connection that keeps writing without the token is cut off") {
    const int fd = connect_raw(endpoint);
    REQUIRE(fd >= 0);
    for (uint64_t seq = 1; seq <= 8; ++seq) {
      send_frame(fd, seq, d.token ^ 7, r0.base, 16, payload);
      Reply r = read_reply(fd);
      CHECK(r.code == static_cast<uint16_t>(ErrorCode::bad_token));
    }
    CHECK(closed_by_peer(fd));
    close(fd);
    CHECK(*target.checksum(r0.base, r0.length) == sum0);
  }
  // Whatever happened above, the listener serves a proper session afterwards.
  auto init = make_initiator("tcp", 4096);
  REQUIRE(init.engine);
  auto s = init.engine->open_session(d);
  REQUIRE(s);
  fill_random(init.src.base, 4096, 8);
  auto b = (*s)->submit({WriteOp{init.src.addr(), d.regions[1].base + 4096, 4096}});
  REQUIRE(b);
  REQUIRE((*b)->wait(10s));
  CHECK((*b)->status().ok());
  CHECK(*target.checksum(d.regions[1].base + 4096, 4096) == xxh(init.src.base, 4096));
  (void)sum1;
}
