// ZMTP heartbeats per link (ChannelConfig::heartbeats_to): a peer that stalls (SIGSTOP: its kernel still
// holds the TCP connection, its ZeroMQ answers nothing) is reported lost on a link that runs them and not on
// one that does not; a peer that dies is reported on both, because its kernel closes the connection.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "epd/transport/control_channel.hpp"

using namespace epd::transport;
using namespace std::chrono_literals;

namespace heartbeat_test {

// A ZeroMQ ROUTER in a child process that echoes every frame back to its sender.
class PeerProcess {
 public:
  PeerProcess() {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::close(fds[0]);
      zmq::context_t ctx;
      zmq::socket_t router(ctx, zmq::socket_type::router);
      router.bind("tcp://127.0.0.1:*");
      const std::string ep = router.get(zmq::sockopt::last_endpoint);
      if (::write(fds[1], ep.data(), ep.size()) != ssize_t(ep.size())) ::_exit(1);
      ::close(fds[1]);
      while (true) {
        zmq::message_t from, frame;
        if (!router.recv(from) || !router.recv(frame)) ::_exit(1);
        router.send(from, zmq::send_flags::sndmore);
        router.send(frame, zmq::send_flags::none);
      }
    }
    ::close(fds[1]);
    char buf[256];
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    ::close(fds[0]);
    REQUIRE(n > 0);
    endpoint_.assign(buf, size_t(n));
  }
  ~PeerProcess() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  void signal(int sig) const { REQUIRE(::kill(pid_, sig) == 0); }

 private:
  pid_t pid_ = -1;
  std::string endpoint_;
};

struct Events {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> seen;
  void add(const std::string& s) {
    std::lock_guard lock(mu);
    seen.push_back(s);
    cv.notify_all();
  }
  bool wait_for(size_t want, std::chrono::milliseconds limit = 20s) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, limit, [&] { return seen.size() >= want; });
  }
  std::vector<std::string> now() {
    std::lock_guard lock(mu);
    return seen;
  }
};

}  // namespace heartbeat_test

using namespace heartbeat_test;

TEST_CASE("channel: ZMTP heartbeats drop a stalled peer only on the links that run them", "[channel]") {
  // Both children fork before this test makes a ZeroMQ context (the child makes its own).
  PeerProcess checked, quiet;
  ChannelConfig cfg;
  cfg.identity = "a";
  cfg.bind_endpoint = "tcp://127.0.0.1:*";
  cfg.heartbeat_ivl_ms = 100;
  cfg.heartbeat_timeout_ms = 300;
  cfg.heartbeats_to = [&](const std::string& endpoint) { return endpoint != quiet.endpoint(); };
  Events echoed, lost;
  auto channel = ControlChannel::start(
      cfg, [&](const std::string& from, bool, std::vector<uint8_t>) { echoed.add(from); },
      [&](const std::string& endpoint) { lost.add(endpoint); });
  REQUIRE(channel);
  (*channel)->send(checked.endpoint(), {1});
  (*channel)->send(quiet.endpoint(), {2});
  REQUIRE(echoed.wait_for(2));  // both connections are up

  checked.signal(SIGSTOP);
  quiet.signal(SIGSTOP);
  REQUIRE(lost.wait_for(1));
  CHECK(lost.now() == std::vector<std::string>{checked.endpoint()});
  // Three times the timeout more: the link without heartbeats still holds its stalled peer.
  std::this_thread::sleep_for(900ms);
  CHECK(lost.now().size() == 1);

  // A peer that dies is reported without heartbeats too: its kernel closes the connection.
  quiet.signal(SIGKILL);
  REQUIRE(lost.wait_for(2));
  CHECK(lost.now().back() == quiet.endpoint());
  (*channel)->stop();
}
