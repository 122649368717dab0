// Bytes no HTTP client would send, written straight to the server's socket: it must answer or hang up,
// never crash, and keep serving real requests.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>

#include "test_server.hpp"

using namespace epd::http::test;

namespace {

// Connects, sends `bytes`, optionally half-closes, and returns what arrives until the server closes, nothing
// arrives for `wait`, or 200 ms pass in silence after the first bytes (a keep-alive server stays open).
// httplib takes a half-closed connection for a gone client and answers nothing: use that for "client
// vanished".
std::string send_raw(uint16_t port, std::string_view bytes, bool half_close = false,
                     std::chrono::milliseconds wait = std::chrono::milliseconds(3000)) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may hang up early; that is allowed
    sent += static_cast<size_t>(n);
  }
  if (half_close) ::shutdown(fd, SHUT_WR);
  std::string received;
  char buf[4096];
  pollfd p{fd, POLLIN, 0};
  while (::poll(&p, 1, received.empty() ? static_cast<int>(wait.count()) : 200) > 0) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    received.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return received;
}

std::string status_line(const std::string& reply) {
  return reply.substr(0, reply.find("\r\n"));
}

void check_still_serving(TestServer& server) {
  auto cli = server.client();
  auto res = cli.Post("/v1/generate", R"({"prompt":"alive"})", "application/json");
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(nlohmann::json::parse(res->body)["text"] == "echo:alive");
}

}  // namespace

TEST_CASE("random garbage on the socket gets a 400 or a hang-up", "[http][raw]") {
  TestServer server;
  std::mt19937 rng(42);
  for (int round = 0; round < 12; ++round) {
    std::string junk(1 + rng() % 3000, '\0');
    for (auto& c : junk) c = static_cast<char>(rng());
    if (round % 2) junk += "\r\n\r\n";
    auto reply = send_raw(server.port, junk, round % 3 == 0);
    if (!reply.empty()) CHECK(status_line(reply).starts_with("HTTP/1.1 4"));
  }
  CHECK(server.service.generate_calls == 0);
  check_still_serving(server);
}

TEST_CASE("malformed and truncated HTTP does not reach the service", "[http][raw]") {
  TestServer server;
  // A request line that is not HTTP.
  auto reply = send_raw(server.port, "HELLO\r\n\r\n");
  CHECK(status_line(reply) == "HTTP/1.1 400 Bad Request");
  CHECK(reply.find("Content-Type: application/json") != std::string::npos);
  CHECK(reply.find(R"("message":"malformed HTTP request: )") != std::string::npos);
  // Headers cut off mid-way, then the client vanishes or stalls (request timeout).
  send_raw(server.port, "POST /v1/generate HTTP/1.1\r\nHost: x\r\nContent-Le", true);
  reply = send_raw(server.port, "POST /v1/generate HTTP/1.1\r\nHost: x\r\nContent-Le");
  CHECK(status_line(reply) == "HTTP/1.1 408 Request Timeout");
  CHECK(reply.find("did not arrive") != std::string::npos);
  // A body shorter than its Content-Length: vanishing, then stalling.
  send_raw(server.port, "POST /v1/generate HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"prompt\":", true);
  reply = send_raw(server.port, "POST /v1/generate HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"prompt\":");
  CHECK(status_line(reply) == "HTTP/1.1 408 Request Timeout");
  CHECK(reply.find("did not arrive") != std::string::npos);
  // A bogus Content-Length.
  send_raw(server.port, "POST /v1/generate HTTP/1.1\r\nContent-Length: -5\r\n\r\n{}");
  send_raw(server.port, "POST /v1/generate HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n{}");
  // An over-long request line.
  reply = send_raw(server.port, "GET /" + std::string(20000, 'a') + " HTTP/1.1\r\n\r\n");
  CHECK(status_line(reply) == "HTTP/1.1 431 Request Header Fields Too Large");
  // Connect and hang up at once, many times.
  for (int i = 0; i < 50; ++i) send_raw(server.port, "", true, std::chrono::milliseconds(100));
  // An unknown method.
  reply = send_raw(server.port, "BREW /health HTTP/1.1\r\n\r\n");
  CHECK(status_line(reply) == "HTTP/1.1 405 Method Not Allowed");

  CHECK(server.service.generate_calls == 0);
  check_still_serving(server);
}

TEST_CASE("chunked bodies are capped and checked like any other", "[http][raw]") {
  TestServer server;
  const std::string head = "POST /v1/generate HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";

  // A good chunked request works.
  std::string body = R"({"prompt":"chunky"})";
  char size_hex[16];
  std::snprintf(size_hex, sizeof(size_hex), "%zx", body.size());
  auto reply = send_raw(server.port, head + size_hex + "\r\n" + body + "\r\n0\r\n\r\n");
  CHECK(status_line(reply) == "HTTP/1.1 200 OK");
  CHECK(reply.find("echo:chunky") != std::string::npos);

  // 80 KiB in 1 KiB chunks: over the 64 KiB limit although no Content-Length says so.
  std::string big = head;
  for (int i = 0; i < 80; ++i) big += "400\r\n" + std::string(1024, ' ') + "\r\n";
  big += "0\r\n\r\n";
  reply = send_raw(server.port, big);
  CHECK(status_line(reply) == "HTTP/1.1 413 Payload Too Large");
  CHECK(reply.find("exceeds the limit of 65536 bytes") != std::string::npos);

  // Broken chunk framing.
  reply = send_raw(server.port, head + "zz\r\n{}\r\n0\r\n\r\n");
  CHECK(status_line(reply) == "HTTP/1.1 400 Bad Request");

  CHECK(server.service.generate_calls == 1);
  check_still_serving(server);
}

TEST_CASE("Expect: 100-continue with an oversize body is refused before the body is sent", "[http][raw]") {
  TestServer server;
  auto reply = send_raw(
      server.port, "POST /v1/generate HTTP/1.1\r\nContent-Length: 100000000\r\nExpect: 100-continue\r\n\r\n",
      false, std::chrono::milliseconds(2000));
  CHECK(status_line(reply) == "HTTP/1.1 413 Payload Too Large");
  CHECK(reply.find("Connection: close") != std::string::npos);

  reply = send_raw(server.port,
                   "POST /v1/generate HTTP/1.1\r\nContent-Length: 19\r\nExpect: 100-continue\r\n\r\n", false,
                   std::chrono::milliseconds(300));
  CHECK(status_line(reply) == "HTTP/1.1 100 Continue");
  check_still_serving(server);
}
