// Control channels sharing a hub (one ZeroMQ context, one I/O thread): hundreds of them cost no thread
// each, every frame still arrives on the channel it was sent to, a lost connection is still reported, and
// a channel stopped while others send to it leaves the rest working.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../common/no_free_descriptors.hpp"
#include "epd/transport/channel_hub.hpp"
#include "epd/transport/control_channel.hpp"

using namespace epd::transport;

namespace hub_test {

int descriptors_now() {
  return int(std::distance(std::filesystem::directory_iterator("/proc/self/fd"), {}));
}

int threads_now() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

ChannelConfig on_hub(const std::string& id, std::shared_ptr<ChannelHub> hub) {
  ChannelConfig c;
  c.identity = id;
  c.bind_endpoint = "tcp://127.0.0.1:*";
  c.hub = std::move(hub);
  return c;
}

struct Counter {
  std::mutex mu;
  std::condition_variable cv;
  size_t n = 0;
  std::vector<std::string> last;
  void add(std::string s) {
    std::lock_guard lock(mu);
    ++n;
    last.push_back(std::move(s));
    cv.notify_all();
  }
  bool wait_for(size_t want, std::chrono::seconds limit = std::chrono::seconds(20)) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, limit, [&] { return n >= want; });
  }
};

}  // namespace hub_test

using namespace hub_test;

TEST_CASE("channel hub: 300 channels on one thread each get their own frames and answers", "[channel]") {
  auto hub = ChannelHub::start();
  REQUIRE(hub);
  const int before = threads_now();
  constexpr int n = 300;
  // The centre is a standalone channel, as the registry is: it answers every frame to its sender.
  std::unique_ptr<ControlChannel>* centre_ptr = nullptr;
  auto centre = ControlChannel::start(on_hub("centre", nullptr),
                                      [&](const std::string& from, bool via_router, std::vector<uint8_t> f) {
                                        if (via_router) (*centre_ptr)->reply(from, std::move(f));
                                      });
  REQUIRE(centre);
  centre_ptr = &centre.value();
  std::vector<Counter> got(n);
  std::vector<std::unique_ptr<ControlChannel>> members;
  for (int i = 0; i < n; ++i) {
    auto c = ControlChannel::start(on_hub("m" + std::to_string(i), *hub),
                                   [&got, i](const std::string&, bool, std::vector<uint8_t> f) {
                                     got[i].add(std::string(f.begin(), f.end()));
                                   });
    REQUIRE(c);
    members.push_back(std::move(*c));
  }
  CHECK((*hub)->channels() == size_t(n));
  // Standalone, each would have added two threads (its own and its context's): 600.
  CHECK(threads_now() - before < 20);
  // Each member asks the centre (answered through the centre's ROUTER to the member's DEALER), and its
  // neighbour (to the neighbour's ROUTER).
  for (int i = 0; i < n; ++i) {
    members[i]->send((*centre)->endpoint(), {uint8_t('a' + i % 26)});
    members[i]->send(members[(i + 1) % n]->endpoint(), {uint8_t('A' + i % 26)});
  }
  for (int i = 0; i < n; ++i) {
    REQUIRE(got[i].wait_for(2));
    std::lock_guard lock(got[i].mu);
    const std::string own(1, char('a' + i % 26)), from_left(1, char('A' + (i + n - 1) % n % 26));
    CHECK(((got[i].last[0] == own && got[i].last[1] == from_left) ||
           (got[i].last[1] == own && got[i].last[0] == from_left)));
  }
  for (auto& m : members) CHECK(m->stats().late_reads == 0);
  members.clear();
  CHECK((*hub)->channels() == 0);
}

TEST_CASE("channel hub: a peer that stops is reported lost, and the channels left keep working",
          "[channel]") {
  auto hub = ChannelHub::start();
  REQUIRE(hub);
  auto with_heartbeats = [&](const std::string& id) {
    auto c = on_hub(id, *hub);
    c.heartbeat_ivl_ms = 100;
    c.heartbeat_timeout_ms = 300;
    return c;
  };
  Counter lost, at_c;
  auto a = ControlChannel::start(
      with_heartbeats("a"), [](const std::string&, bool, std::vector<uint8_t>) {},
      [&](const std::string& endpoint) { lost.add(endpoint); });
  Counter at_b;
  auto b = ControlChannel::start(with_heartbeats("b"),
                                 [&](const std::string&, bool, std::vector<uint8_t>) { at_b.add(""); });
  auto c = ControlChannel::start(with_heartbeats("c"),
                                 [&](const std::string&, bool, std::vector<uint8_t>) { at_c.add(""); });
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(c);
  const std::string b_endpoint = (*b)->endpoint();
  (*a)->send(b_endpoint, {1});
  REQUIRE(at_b.wait_for(1));
  // b stops while a keeps sending to it from another thread.
  std::atomic<bool> done{false};
  std::thread sender([&] {
    while (!done.load()) (*a)->send(b_endpoint, {2});
  });
  (*b)->stop();
  REQUIRE(lost.wait_for(1));
  done.store(true);
  sender.join();
  {
    std::lock_guard lock(lost.mu);
    CHECK(lost.last[0] == b_endpoint);
  }
  (*a)->send((*c)->endpoint(), {3});
  CHECK(at_c.wait_for(1));
}

// The registry's process sends to every member: each peer must cost its TCP connection and nothing more
// (a DEALER with a monitor per peer cost four descriptors, the registry's process five per member).
TEST_CASE("channel: each peer sent to costs one descriptor and forgetting it gives it back", "[channel]") {
  auto hub = ChannelHub::start();
  REQUIRE(hub);
  constexpr int n = 200;
  Counter got;
  std::vector<std::unique_ptr<ControlChannel>> peers;
  for (int i = 0; i < n; ++i) {
    auto c = ControlChannel::start(on_hub("p" + std::to_string(i), *hub),
                                   [&](const std::string&, bool, std::vector<uint8_t>) { got.add(""); });
    REQUIRE(c);
    peers.push_back(std::move(*c));
  }
  auto sender =
      ControlChannel::start(on_hub("sender", nullptr), [](const std::string&, bool, std::vector<uint8_t>) {});
  REQUIRE(sender);
  const int before = descriptors_now();
  for (const auto& p : peers) (*sender)->send(p->endpoint(), {1});
  REQUIRE(got.wait_for(n));
  // Both ends of each connection are in this process: two per peer, plus a few for the I/O threads.
  const int connected = descriptors_now();
  CHECK(connected - before <= 2 * n + 8);
  CHECK(connected - before >= 2 * n);  // the connections are counted: the bound is not vacuous
  for (const auto& p : peers) (*sender)->forget(p->endpoint());
  int now = descriptors_now();
  for (int waited = 0; waited < 10000 && now > before + 8; waited += 50) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    now = descriptors_now();
  }
  CHECK(now <= before + 8);
  // A forgotten peer is reached again through a new connection.
  (*sender)->send(peers[0]->endpoint(), {2});
  CHECK(got.wait_for(n + 1));
}

TEST_CASE("channel hub: a CURVE channel cannot share one", "[channel]") {
  auto hub = ChannelHub::start();
  REQUIRE(hub);
  auto cfg = on_hub("x", *hub);
  cfg.curve = CurveConfig{};
  auto c = ControlChannel::start(cfg, [](const std::string&, bool, std::vector<uint8_t>) {});
  REQUIRE_FALSE(c);
  CHECK(c.error().to_string().find("hub") != std::string::npos);
}

// Thousands of channels in one process can run it out of descriptors: starting one more is then an error
// naming the cause, for a standalone channel (its ZeroMQ context needs one) and one on a hub alike.
TEST_CASE("channel: a start without free descriptors is an error, not a crash", "[channel]") {
  auto hub = ChannelHub::start();
  REQUIRE(hub);
  epd::testing::NoFreeDescriptors none;
  REQUIRE(none.active());
  auto alone =
      ControlChannel::start(on_hub("alone", nullptr), [](const std::string&, bool, std::vector<uint8_t>) {});
  auto shared =
      ControlChannel::start(on_hub("shared", *hub), [](const std::string&, bool, std::vector<uint8_t>) {});
  none.restore();
  REQUIRE_FALSE(alone);
  CHECK(alone.error().code == epd::protocol::ErrorCode::io_error);
  REQUIRE_FALSE(shared);
  CHECK(shared.error().code == epd::protocol::ErrorCode::io_error);
  CHECK(ControlChannel::start(on_hub("later", *hub), [](const std::string&, bool, std::vector<uint8_t>) {}));
}
