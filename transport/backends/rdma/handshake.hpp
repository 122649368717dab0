#pragma once
// The rdma backend's side channel: a small TCP exchange of QP numbers, PSNs and GIDs (docs/transport.md,
// "RDMA handshake"). The requester opens a TCP connection to the target's `handshake_endpoint`, sends one
// Hello, the target creates its responder QPs and answers one Hello; the connection then stays open for
// the link's lifetime, so either side sees the other go away (EOF) and tears its QPs down. The requester
// also asks on it for the keys of a grant (below) before its first write into fenced memory under that grant.
//
// Wire format (all integers big-endian), 44 + 8*qp_count bytes:
//   0..3   magic "EPDR"
//   4      version (1)
//   5      kind: 1 = request, 2 = accept, 3 = reject
//   6..7   qp_count (1..64; 0 in a reject)
//   8      path MTU as ibv_mtu (1 = 256 ... 5 = 4096): the sender's active MTU
//   9      reject reason (0 in request/accept; see HandshakeReject)
//   10..11 LID (0 on RoCE)
//   12..27 GID (16 bytes)
//   28..35 target incarnation (u64): the incarnation the requester saw in the target's descriptor (0 in
//   replies) 36..43 target token (u64): the token from that descriptor (0 in replies) 44..   qp_count x { qpn
//   (u32), psn (u32) }
#include <array>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "epd/transport/types.hpp"

namespace epd::transport::rdma {

inline constexpr uint8_t kHandshakeVersion = 1;
inline constexpr uint16_t kMaxQpsPerLink = 64;

enum class HelloKind : uint8_t { request = 1, accept = 2, reject = 3 };
enum class HandshakeReject : uint8_t {
  none = 0,
  bad_token = 1,
  stale_incarnation = 2,
  no_resources = 3,
  malformed = 4
};

struct QpEndpoint {
  uint32_t qpn = 0;
  uint32_t psn = 0;  // 24 bits used
  bool operator==(const QpEndpoint&) const = default;
};

struct Hello {
  HelloKind kind = HelloKind::request;
  uint8_t mtu = 0;
  HandshakeReject reason = HandshakeReject::none;
  uint16_t lid = 0;
  std::array<uint8_t, 16> gid{};
  uint64_t target_incarnation = 0;  // request only
  uint64_t target_token = 0;        // request only
  std::vector<QpEndpoint> qps;
  bool operator==(const Hello&) const = default;
};

inline constexpr size_t kHelloFixedBytes = 44;
std::vector<uint8_t> encode_hello(const Hello& h);
// Bytes still needed after the fixed part (from its header), or an error for a bad header.
Result<size_t> hello_tail_bytes(std::span<const uint8_t> fixed);
Result<Hello> decode_hello(std::span<const uint8_t> bytes);

// --- socket helpers (blocking fds, every wait bounded by `deadline`) ---
using Clock = std::chrono::steady_clock;
// Listens on host:port (port 0 = any); returns the fd and the bound port.
Result<int> listen_tcp(const std::string& host, uint16_t port, uint16_t& bound_port);
Result<int> connect_tcp(const std::string& endpoint, Clock::time_point deadline);
Status write_all(int fd, std::span<const uint8_t> bytes, Clock::time_point deadline);
Status read_exact(int fd, std::span<uint8_t> out, Clock::time_point deadline);
// Reads one whole Hello.
Result<Hello> read_hello(int fd, Clock::time_point deadline);

// Grant query, after the Hello, requester -> target (12 bytes): magic "EPDG", the fence key (u64).
// Reply (8 + 20*count bytes): magic "EPDG", count (u32, at most kMaxGrantRuns), count x { addr (u64),
// len (u64), rkey (u32) }: one registration per contiguous run the key owns. count 0: no such live grant.
inline constexpr size_t kGrantQueryBytes = 12;
inline constexpr uint32_t kMaxGrantRuns = 4096;
struct GrantRun {
  uint64_t addr = 0;
  uint64_t len = 0;
  uint32_t rkey = 0;
  bool operator==(const GrantRun&) const = default;
};
std::vector<uint8_t> encode_grant_query(uint64_t key);
Result<uint64_t> decode_grant_query(std::span<const uint8_t> bytes);
std::vector<uint8_t> encode_grant_reply(std::span<const GrantRun> runs);
Result<std::vector<GrantRun>> read_grant_reply(int fd, Clock::time_point deadline);
// True when the peer closed the connection or it failed (non-blocking check).
bool peer_gone(int fd);

}  // namespace epd::transport::rdma
