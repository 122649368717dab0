// The control channel's threading: any thread sends on the sockets itself, under the channel's lock, while
// the I/O thread reads them. Frames from many threads at once all arrive, each thread's in its order; an
// answer that arrives while a sender holds the socket still reaches the handler; forget, restart and stop
// race with senders without losing the channel or crashing.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "epd/transport/control_channel.hpp"

using namespace epd::transport;

namespace {

std::vector<uint8_t> bytes(const std::string& s) {
  return {s.begin(), s.end()};
}

ChannelConfig plain(const std::string& id, const std::string& bind = "tcp://127.0.0.1:*") {
  ChannelConfig c;
  c.identity = id;
  c.bind_endpoint = bind;
  return c;
}

// Frames a handler received, with a wait for a count.
struct Received {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> frames;
  ControlChannel::Handler handler() {
    return [this](const std::string&, bool, std::vector<uint8_t> f) {
      std::lock_guard lock(mu);
      frames.emplace_back(f.begin(), f.end());
      cv.notify_all();
    };
  }
  bool wait_for(size_t n, std::chrono::seconds limit = std::chrono::seconds(20)) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, limit, [&] { return frames.size() >= n; });
  }
  size_t size() {
    std::lock_guard lock(mu);
    return frames.size();
  }
};

}  // namespace

TEST_CASE("channel: frames from many threads at once all arrive, each thread's in order", "[channel]") {
  Received at_b;
  auto b = ControlChannel::start(plain("b"), at_b.handler());
  REQUIRE(b);
  auto a = ControlChannel::start(plain("a"), [](const std::string&, bool, std::vector<uint8_t>) {});
  REQUIRE(a);
  constexpr int threads = 4, per_thread = 2000;  // 8,000: under the 10,000 a peer queue holds
  std::vector<std::thread> senders;
  for (int t = 0; t < threads; ++t)
    senders.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i)
        (*a)->send((*b)->endpoint(), bytes(std::to_string(t) + ":" + std::to_string(i)));
    });
  for (auto& s : senders) s.join();
  REQUIRE(at_b.wait_for(threads * per_thread));
  std::map<int, int> next;  // thread -> the sequence number expected next
  std::lock_guard lock(at_b.mu);
  for (const auto& f : at_b.frames) {
    const auto colon = f.find(':');
    const int t = std::stoi(f.substr(0, colon)), i = std::stoi(f.substr(colon + 1));
    CHECK(i == next[t]);
    next[t] = i + 1;
  }
  for (int t = 0; t < threads; ++t) CHECK(next[t] == per_thread);
  CHECK((*a)->stats().sent == uint64_t(threads * per_thread));
  CHECK((*a)->stats().dropped_send == 0);
  CHECK((*b)->stats().late_reads == 0);
}

// Each answer arrives on the DEALER the sender is busy sending on: a send that consumes the socket's
// "look at me" signal must make the I/O thread look, or answers would sit until its idle tick.
TEST_CASE("channel: answers arrive while their socket is busy sending, from the handler's own thread too",
          "[channel]") {
  std::unique_ptr<ControlChannel>* b_ptr = nullptr;
  auto b = ControlChannel::start(plain("b"),
                                 [&](const std::string& from, bool via_router, std::vector<uint8_t> f) {
                                   if (via_router)
                                     (*b_ptr)->reply(from, std::move(f));  // echo, from b's I/O thread
                                 });
  REQUIRE(b);
  b_ptr = &b.value();
  Received at_a;
  auto a = ControlChannel::start(plain("a"), at_a.handler());
  REQUIRE(a);
  constexpr int threads = 3, per_thread = 2000;
  std::vector<std::thread> senders;
  for (int t = 0; t < threads; ++t)
    senders.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i)
        (*a)->send((*b)->endpoint(), bytes(std::to_string(t * per_thread + i)));
    });
  for (auto& s : senders) s.join();
  REQUIRE(at_a.wait_for(threads * per_thread));
  CHECK((*b)->stats().received == uint64_t(threads * per_thread));
  CHECK((*a)->stats().received == uint64_t(threads * per_thread));
  // Paced: a send more than a millisecond after the last one processes the socket's pending commands, so it
  // is the send, not the I/O thread, that sees an answer which has just arrived.
  std::vector<std::thread> paced;
  for (int t = 0; t < threads; ++t)
    paced.emplace_back([&] {
      for (int i = 0; i < 300; ++i) {
        (*a)->send((*b)->endpoint(), bytes("paced"));
        std::this_thread::sleep_for(std::chrono::microseconds(1100));
      }
    });
  for (auto& s : paced) s.join();
  REQUIRE(at_a.wait_for(threads * (per_thread + 300)));
  // One at a time: each answer must come back (no bulk traffic left to wake the I/O thread).
  for (int i = 0; i < 50; ++i) {
    (*a)->send((*b)->endpoint(), bytes("ping"));
    REQUIRE(at_a.wait_for(size_t(threads * (per_thread + 300) + i + 1)));
  }
  CHECK((*a)->stats().late_reads == 0);
  CHECK((*b)->stats().late_reads == 0);
}

TEST_CASE(
    "channel: forget while other threads send, then a restarted peer on the same endpoint gets new frames",
    "[channel]") {
  Received at_b1;
  auto b1 = ControlChannel::start(plain("b"), at_b1.handler());
  REQUIRE(b1);
  const std::string endpoint = (*b1)->endpoint();
  auto a = ControlChannel::start(plain("a"), [](const std::string&, bool, std::vector<uint8_t>) {});
  REQUIRE(a);
  std::atomic<bool> go{true};
  std::vector<std::thread> senders;
  for (int t = 0; t < 2; ++t)
    senders.emplace_back([&] {
      while (go.load()) (*a)->send(endpoint, bytes("noise"));
    });
  for (int i = 0; i < 200; ++i) (*a)->forget(endpoint);  // each drops the DEALER under the senders' feet
  go = false;
  for (auto& s : senders) s.join();
  (*a)->send(endpoint, bytes("after the forgets"));  // the noise may all have been discarded
  REQUIRE(at_b1.wait_for(1));
  (*b1)->stop();
  (*a)->forget(endpoint);  // as the bridge does when the peer is reported dead
  Received at_b2;
  auto b2 = ControlChannel::start(plain("b", endpoint), at_b2.handler());
  REQUIRE(b2);
  (*a)->send(endpoint, bytes("for the new one"));
  REQUIRE(at_b2.wait_for(1));
  std::lock_guard lock(at_b2.mu);
  CHECK(at_b2.frames.back() == "for the new one");
}

TEST_CASE("channel: stop while threads send: later frames are dropped and counted, nothing crashes",
          "[channel]") {
  Received at_b;
  auto b = ControlChannel::start(plain("b"), at_b.handler());
  REQUIRE(b);
  auto a = ControlChannel::start(plain("a"), [](const std::string&, bool, std::vector<uint8_t>) {});
  REQUIRE(a);
  std::atomic<bool> go{true};
  std::atomic<int> sends{0};
  std::vector<std::thread> senders;
  for (int t = 0; t < 3; ++t)
    senders.emplace_back([&] {
      while (go.load()) {
        (*a)->send((*b)->endpoint(), bytes("x"));
        (*a)->reply("b", bytes("y"));  // b never reached a's ROUTER: dropped either way
        ++sends;
      }
    });
  while (sends.load() < 1000) std::this_thread::yield();
  (*a)->stop();
  const uint64_t dropped_at_stop = (*a)->stats().dropped_send;
  const int at_stop = sends.load();
  while (sends.load() < at_stop + 100) std::this_thread::yield();
  go = false;
  for (auto& s : senders) s.join();
  CHECK((*a)->stats().dropped_send >= dropped_at_stop + 200);  // every send after stop, and its reply
  CHECK(at_b.size() > 0);
}
