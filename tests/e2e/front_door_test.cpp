// The router's front door under an operator's kind of abuse (issue 13): bursts over the in-flight limit,
// clients that hang up, SIGTERM with requests in flight, hundreds of idle and trickling connections, and
// large refused uploads. Real role processes on 127.0.0.1. Latencies are printed; the assertions bound them
// only loosely (they guard against the old behaviour: 24 s stalls), never as performance goals.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <httplib.h>
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <thread>

#include "cluster.hpp"

using namespace epd::testing;
using nlohmann::json;
using clock_type = std::chrono::steady_clock;

namespace {

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

int connect_to(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  return fd;
}

void send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return;
    data.remove_prefix(size_t(n));
  }
}

httplib::Client client(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(5);
  c.set_read_timeout(60);
  return c;
}

uint64_t rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  return 0;
}

std::string generate_body(const std::string& prompt, int max_tokens) {
  return json{{"prompt", prompt}, {"max_tokens", max_tokens}}.dump();
}

}  // namespace

TEST_CASE("front door: a burst over the in-flight limit and the queue gets 429 with Retry-After", "[front]") {
  ClusterSpec spec;
  spec.model_preset = "bench";
  spec.defaults["router"] = "max_in_flight = 2\nmax_queued = 2\nmax_tokens_limit = 2048\n";
  Cluster cluster(spec);
  cluster.start();
  std::atomic<int> ok{0}, rejected{0}, other{0}, with_retry_after{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 12; ++i)
    clients.emplace_back([&, i] {
      auto res =
          client(cluster.http_port())
              .Post("/v1/generate", generate_body("burst " + std::to_string(i), 600), "application/json");
      if (res && res->status == 200) {
        ++ok;
      } else if (res && res->status == 429) {
        ++rejected;
        if (res->get_header_value("Retry-After") == "1") ++with_retry_after;
        auto j = json::parse(res->body);
        if (j["error"]["code"] != "out_of_capacity") ++other;
      } else {
        ++other;
      }
    });
  for (auto& c : clients) c.join();
  INFO(cluster.logs());
  CHECK(other == 0);
  CHECK(ok >= 4);  // 2 in flight + 2 queued at least
  CHECK(rejected >= 1);
  CHECK(with_retry_after == rejected);
  auto stats = cluster.stats();
  CHECK(stats["rejected"] == rejected.load());
  CHECK(stats["completed"] == ok.load());
  CHECK(stats["in_flight"] == 0);
  CHECK(stats["queued"] == 0);
  std::printf("front door burst: 12 requests, %d answered, %d refused with 429\n", ok.load(),
              rejected.load());
}

// Admission from the prompt backlog (docs/http-api.md, "Admission"): prefill held at 300 ms a prompt, a
// burst whose prompts would need more than the request timeout at the rate the router measured. Requests
// whose first token it expects later than max_queue_wait_ms (2 s) are refused at once with 429 and a
// Retry-After from the backlog; every admitted one must then be answered, none late with a 504. The margin
// is an argument: an admitted request expects at most 2 s of the 6 s timeout, so the host may run the
// burst at a third of the warm-up's pace and still pass.
TEST_CASE("front door: prompts expected past max_queue_wait are refused at once with 429, none fail late",
          "[front]") {
  ClusterSpec spec;
  spec.request_timeout_ms = 6000;
  spec.defaults["prefill"] = "chunk_delay_ms = 300\n";
  spec.defaults["router"] = "max_queue_wait_ms = 2000\n";
  Cluster cluster(spec);
  cluster.start();
  auto prompt = [](int i) { return std::to_string(1000 + i) + ": the backlog decides whether this waits"; };
  for (int i = 0; i < 2; ++i) {  // the router measures the rate prompts are answered at
    auto res =
        client(cluster.http_port()).Post("/v1/completions", generate_body(prompt(i), 4), "application/json");
    REQUIRE(res);
    REQUIRE(res->status == 200);
  }
  const json warm = cluster.stats();
  INFO(warm.dump());
  REQUIRE(warm["prompt_tokens_per_s"].is_number());
  const double rate = warm["prompt_tokens_per_s"];
  CHECK(warm["prompt_backlog_tokens"] == 0);

  constexpr int kBurst = 30;
  std::atomic<int> ok{0}, refused{0}, other{0}, max_retry_after{0};
  std::atomic<int64_t> prompt_tokens{0};
  std::string first_other;
  std::mutex mu;
  std::vector<std::thread> clients;
  for (int i = 0; i < kBurst; ++i)
    clients.emplace_back([&, i] {
      auto res = client(cluster.http_port())
                     .Post("/v1/completions", generate_body(prompt(100 + i), 4), "application/json");
      const json body = res ? json::parse(res->body, nullptr, false) : json();
      if (res && res->status == 200) {
        ++ok;
        prompt_tokens += body["usage"]["prompt_tokens"].get<int64_t>();
      } else if (res && res->status == 429 && body["error"]["code"] == "out_of_capacity" &&
                 body["error"]["message"].get<std::string>().find("max_queue_wait_ms") != std::string::npos) {
        ++refused;
        const int after = std::stoi(
            res->get_header_value("Retry-After", 0).empty() ? "0" : res->get_header_value("Retry-After"));
        if (after < 1) ++other;
        int seen = max_retry_after;
        while (after > seen && !max_retry_after.compare_exchange_weak(seen, after)) {
        }
      } else {
        ++other;
        std::lock_guard lock(mu);
        if (first_other.empty())
          first_other = res ? std::to_string(res->status) + " " + res->body : "no answer";
      }
    });
  for (auto& c : clients) c.join();
  const json stats = cluster.stats();
  std::printf(
      "front door backlog: %d requests at once, %d answered, %d refused (Retry-After up to %d s); "
      "measured %.0f prompt tokens/s\n",
      kBurst, ok.load(), refused.load(), max_retry_after.load(), rate);
  INFO(first_other);
  INFO(stats.dump());
  // The premise: the whole burst needs more than the timeout at the measured rate (each answered prompt
  // stands for the others: they are the same length to a token or two).
  REQUIRE(ok > 0);
  CHECK(double(prompt_tokens) / ok * kBurst / rate > 6.0);
  CHECK(other == 0);  // no 504, no 5xx: a request is answered or refused at once
  CHECK(ok >= 2);
  CHECK(refused >= 1);
  CHECK(stats["rejected"] == refused.load());
  CHECK(stats["completed"] == ok.load() + 2);
  CHECK(stats["prompt_backlog_tokens"] == 0);  // every prompt left the backlog
}

TEST_CASE("front door: a client that hangs up cancels its room on every role and frees its pages",
          "[front]") {
  ClusterSpec spec;
  spec.model_preset = "bench";
  spec.defaults["router"] = "max_tokens_limit = 2048\n";
  Cluster cluster(spec);
  cluster.start();

  int fd = connect_to(cluster.http_port());
  const std::string body = generate_body("a long answer nobody waits for", 2000);
  send_all(fd, "POST /v1/generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                   std::to_string(body.size()) + "\r\n\r\n" + body);
  // Wait until decode holds its pages (the room is generating), then hang up.
  cluster.instance_when(
      "decode-0", [](const json& d) { return d.value("free_kv_pages", 0) < d.value("total_kv_pages", 0); });
  const auto t0 = clock_type::now();
  ::close(fd);

  json stats;
  for (int i = 0; i < 100 && (stats = cluster.stats()).value("cancelled", 0) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const double router_ms = ms_since(t0);
  auto after = cluster.wait_all_free();
  const double free_ms = ms_since(t0);
  INFO(cluster.logs());
  CHECK(stats["cancelled"] == 1);
  CHECK(stats["completed"] == 0);
  for (const auto& i : after) {
    if (i["role"] == "decode") {
      CHECK(i["free_kv_pages"] == i["total_kv_pages"]);
      CHECK(i["cancelled_rooms"] == 1);  // decode ended the room because of the CANCEL
    }
  }
  std::printf("front door cancel: disconnect -> router cancelled %.1f ms, -> all pages free %.1f ms\n",
              router_ms, free_ms);

  // The router still serves.
  auto [status, j] = cluster.generate({{"prompt", "still here"}, {"max_tokens", 4}});
  CHECK(status == 200);
}

TEST_CASE("front door: SIGTERM drains the router without losing a request in flight", "[front]") {
  ClusterSpec spec;
  spec.model_preset = "bench";
  spec.defaults["router"] = "max_tokens_limit = 2048\ndrain_timeout_ms = 20000\n";
  Cluster cluster(spec);
  cluster.start();
  constexpr int kRequests = 6;
  std::atomic<int> ok{0};
  std::atomic<int> started{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kRequests; ++i)
    clients.emplace_back([&, i] {
      ++started;
      auto res =
          client(cluster.http_port())
              .Post("/v1/generate", generate_body("drain " + std::to_string(i), 400), "application/json");
      if (res && res->status == 200 && json::parse(res->body)["tokens"].size() > 0) ++ok;
    });
  while (started < kRequests) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // Wait until the router has every request (they are in flight), then ask it to stop.
  for (int i = 0; i < 500 && cluster.stats().value("in_flight", 0) < kRequests; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(cluster.stats()["in_flight"] == kRequests);
  const pid_t router = cluster.pid("router");
  REQUIRE(::kill(router, SIGTERM) == 0);
  const auto t0 = clock_type::now();
  // The listener closes at once: a new client is refused while the old requests finish.
  bool refused = false;
  for (int i = 0; i < 200 && !refused; ++i) {
    httplib::Client late("127.0.0.1", cluster.http_port());
    late.set_connection_timeout(1);
    refused = !late.Get("/health/live");
    if (!refused) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto& c : clients) c.join();
  const double drained_ms = ms_since(t0);
  INFO(cluster.logs());
  CHECK(refused);
  CHECK(ok == kRequests);
  std::printf("front door drain: %d requests in flight at SIGTERM, all answered within %.0f ms\n", kRequests,
              drained_ms);
}

TEST_CASE("front door: 500 idle and trickling connections do not delay /health/live or a request",
          "[front]") {
  ClusterSpec spec;
  Cluster cluster(spec);
  cluster.start();
  auto cli = client(cluster.http_port());
  auto time_health = [&] {
    const auto t0 = clock_type::now();
    auto res = cli.Get("/health/live");
    REQUIRE(res);
    CHECK(res->status == 200);
    return ms_since(t0);
  };
  auto time_generate = [&] {
    const auto t0 = clock_type::now();
    auto res = cli.Post("/v1/generate", generate_body("hello", 8), "application/json");
    REQUIRE(res);
    CHECK(res->status == 200);
    return ms_since(t0);
  };
  double base_health = 0, base_generate = 0;
  for (int i = 0; i < 10; ++i) base_health = std::max(base_health, time_health());
  for (int i = 0; i < 5; ++i) base_generate = std::max(base_generate, time_generate());

  std::vector<int> fds;
  for (int i = 0; i < 250; ++i) fds.push_back(connect_to(cluster.http_port()));  // idle: not a byte
  for (int i = 0; i < 250; ++i) {
    int fd = connect_to(cluster.http_port());
    send_all(fd, "POST /v1/gener");  // a request begun and never finished
    fds.push_back(fd);
  }
  double worst_health = 0, worst_generate = 0;
  for (int i = 0; i < 20; ++i) worst_health = std::max(worst_health, time_health());
  for (int i = 0; i < 5; ++i) worst_generate = std::max(worst_generate, time_generate());
  INFO(cluster.logs());
  // Before this server, the same load made both wait 24 s. ~100 ms is the goal; 1 s bounds a loaded CI box.
  CHECK(worst_health < 1000);
  CHECK(worst_generate < 1000);
  std::printf(
      "front door idle: worst /health/live %.1f ms (%.1f ms without), worst generate %.1f ms (%.1f ms "
      "without) "
      "with 250 idle + 250 trickling connections\n",
      worst_health, base_health, worst_generate, base_generate);
  for (int fd : fds) ::close(fd);
}

TEST_CASE("front door: refused 10 MiB uploads leave the router's memory near its baseline", "[front]") {
  ClusterSpec spec;
  Cluster cluster(spec);
  cluster.start();
  const pid_t router = cluster.pid("router");
  auto cli = client(cluster.http_port());
  REQUIRE(cli.Get("/health/live"));
  const uint64_t baseline = rss_kib(router);
  const std::string junk(10 << 20, 'x');  // not JSON: read whole, then refused
  int refused = 0;
  uint64_t peak = 0;
  for (int i = 0; i < 50; ++i) {
    auto res = cli.Post("/v1/generate", junk, "application/json");
    if (res && res->status == 400) ++refused;
    peak = std::max(peak, rss_kib(router));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const uint64_t after = rss_kib(router);
  INFO(cluster.logs());
  CHECK(refused == 50);
  CHECK(after < baseline + 32 * 1024);  // the old server kept 284 MB
  std::printf(
      "front door uploads: router RSS %.1f MB before, %.1f MB peak, %.1f MB after 50 refused 10 MiB bodies\n",
      baseline / 1024.0, peak / 1024.0, after / 1024.0);
}

TEST_CASE("front door: 1000 concurrent streams are all served to the end", "[front]") {
  // 1024 rooms: every stream runs at once. 100: decode is full most of the time; the router places the rest
  // again as rooms free up (a full cluster costs no attempt), and still none fails.
  const int aux_slots = GENERATE(1024, 100);
  // This process holds 1000 sockets too.
  rlimit lim{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &lim) == 0);
  lim.rlim_cur = lim.rlim_max;
  setrlimit(RLIMIT_NOFILE, &lim);
  REQUIRE(lim.rlim_max > 1100);

  ClusterSpec spec;
  spec.encoders = 0;
  spec.defaults["router"] = "max_in_flight = 1024\n";
  spec.defaults["decode"] = "kv_pages = 4096\naux_slots = " + std::to_string(aux_slots) + "\n";
  spec.defaults["prefill"] = "kv_pages = 4096\n";
  Cluster cluster(spec);
  cluster.start();
  constexpr int kStreams = 1000;
  const std::string body = json{{"prompt", "Once upon a time"}, {"max_tokens", 8}, {"stream", true}}.dump();
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  struct Stream {
    int fd = -1;
    std::string in;
    bool done = false;
  };
  std::vector<Stream> streams(kStreams);
  const auto t0 = clock_type::now();
  for (auto& s : streams) {
    s.fd = connect_to(cluster.http_port());
    send_all(s.fd, request);
    ::fcntl(s.fd, F_SETFL, O_NONBLOCK);
  }
  int finished = 0;
  const auto deadline = clock_type::now() + std::chrono::seconds(120);
  std::vector<pollfd> fds;
  while (finished < kStreams && clock_type::now() < deadline) {
    fds.clear();
    for (auto& s : streams)
      if (!s.done) fds.push_back({s.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), 1000) <= 0) continue;
    for (auto& s : streams) {
      if (s.done) continue;
      char buf[8192];
      ssize_t n;
      while ((n = ::recv(s.fd, buf, sizeof(buf), 0)) > 0) s.in.append(buf, size_t(n));
      // The chunked stream's last chunk follows [DONE]; EOF would mean the server gave up on it.
      if (s.in.find("data: [DONE]") != std::string::npos && s.in.ends_with("0\r\n\r\n")) {
        s.done = true;
        ++finished;
      } else if (n == 0) {
        s.done = true;  // closed early: counted as not finished
      }
    }
  }
  const double took = ms_since(t0);
  int ok = 0, errors = 0;
  std::string first_text;
  bool same_text = true;
  for (auto& s : streams) {
    const bool fine = s.in.starts_with("HTTP/1.1 200") &&
                      s.in.find("text/event-stream") != std::string::npos &&
                      s.in.find("\"finish_reason\":\"length\"") != std::string::npos &&
                      s.in.find("data: [DONE]") != std::string::npos;
    if (fine) ++ok;
    if (s.in.find("\"error\"") != std::string::npos) ++errors;
    // Every stream asked the same greedy question: the text deltas must agree.
    std::string text;
    for (size_t at = 0; (at = s.in.find("\"text\":\"", at)) != std::string::npos; at += 8) {
      size_t end = s.in.find("\",\"index\"", at);
      if (end != std::string::npos) text += s.in.substr(at + 8, end - at - 8);
    }
    if (first_text.empty()) first_text = text;
    same_text = same_text && text == first_text;
    ::close(s.fd);
  }
  INFO(cluster.logs().substr(0, 20000));
  CHECK(ok == kStreams);
  CHECK(errors == 0);
  CHECK(same_text);
  CHECK(cluster.stats()["completed"] == kStreams);
  std::printf("front door streams: %d concurrent streamed completions, %d complete, in %.0f ms\n", kStreams,
              ok, took);
}
