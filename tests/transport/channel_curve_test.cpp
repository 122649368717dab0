// CURVE on the control channel: keyed channels talk; a peer whose key the cluster does not list (or that
// speaks no CURVE, or claims another instance's routing id) is refused before any frame reaches the handler,
// and counted; a client that has the wrong server key never gets a connection.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <zmq.hpp>

#include "epd/transport/control_channel.hpp"
#include "epd/transport/curve_keys.hpp"

using namespace epd::transport;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path = fs::temp_directory_path() /
                  ("epd-curve-" + std::to_string(::getpid()) + "-" +
                   std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Frames a channel's handler received.
struct Inbox {
  std::mutex mu;
  std::vector<std::pair<std::string, std::string>> frames;  // from, text
  ControlChannel::Handler handler() {
    return [this](const std::string& from, bool, std::vector<uint8_t> f) {
      std::lock_guard lock(mu);
      frames.emplace_back(from, std::string(f.begin(), f.end()));
    };
  }
  size_t size() {
    std::lock_guard lock(mu);
    return frames.size();
  }
};

template <class F>
bool eventually(F f, int ms = 5000) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return f();
}

CurveKeyPair pair() {
  auto p = generate_curve_key_pair();
  REQUIRE(p);
  return *p;
}

// A channel for `id` admitting `allowed` (key -> id); server keys by endpoint from `servers`.
ChannelConfig keyed(const std::string& id, const CurveKeyPair& me, std::map<std::string, std::string> allowed,
                    std::shared_ptr<std::map<std::string, std::string>> servers) {
  ChannelConfig c;
  c.identity = id;
  c.bind_endpoint = "tcp://127.0.0.1:*";
  c.curve = CurveConfig{me.public_key, me.secret_key, std::move(allowed), [servers](const std::string& ep) {
                          return servers->count(ep) ? servers->at(ep) : "";
                        }};
  return c;
}

// A raw DEALER as a rogue would build it: its own key pair and the server key it believes in.
zmq::socket_t rogue(zmq::context_t& ctx, const std::string& routing_id, const CurveKeyPair* me,
                    const std::string& server_key) {
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::routing_id, routing_id);
  s.set(zmq::sockopt::linger, 0);
  if (me) {
    s.set(zmq::sockopt::curve_serverkey, server_key);
    s.set(zmq::sockopt::curve_publickey, me->public_key);
    s.set(zmq::sockopt::curve_secretkey, me->secret_key);
  }
  return s;
}

}  // namespace

TEST_CASE("channel: two channels with cluster keys talk both ways under CURVE", "[curve]") {
  const auto a = pair(), b = pair();
  const std::map<std::string, std::string> allowed = {{a.public_key, "alice"}, {b.public_key, "bob"}};
  auto servers = std::make_shared<std::map<std::string, std::string>>();
  Inbox ia, ib;
  auto alice = ControlChannel::start(keyed("alice", a, allowed, servers), ia.handler());
  auto bob = ControlChannel::start(keyed("bob", b, allowed, servers), ib.handler());
  REQUIRE(alice);
  REQUIRE(bob);
  (*servers)[(*alice)->endpoint()] = a.public_key;
  (*servers)[(*bob)->endpoint()] = b.public_key;
  (*alice)->send((*bob)->endpoint(), {'h', 'i'});
  REQUIRE(eventually([&] { return ib.size() == 1; }));
  CHECK(ib.frames[0] == std::make_pair(std::string("alice"), std::string("hi")));
  (*bob)->reply("alice", {'y', 'o'});
  REQUIRE(eventually([&] { return ia.size() == 1; }));
  CHECK(ia.frames[0].second == "yo");
  CHECK((*alice)->stats().refused_peers == 0);
  CHECK((*bob)->stats().refused_peers == 0);
}

TEST_CASE("channel: unknown keys another cluster's keys and plaintext peers are refused and counted",
          "[curve]") {
  TempDir other_cluster;
  REQUIRE(write_cluster_keys(other_cluster.path, {"alice", "bob"}, false));
  const auto foreign = read_curve_key_file(other_cluster.path / "alice.key");  // valid, but not ours
  REQUIRE(foreign);
  const auto b = pair(), stranger = pair();
  auto servers = std::make_shared<std::map<std::string, std::string>>();
  Inbox ib;
  auto bob = ControlChannel::start(keyed("bob", b, {{b.public_key, "bob"}}, servers), ib.handler());
  REQUIRE(bob);
  zmq::context_t ctx;
  uint64_t refused = 0;
  SECTION("a key nobody listed") {
    auto s = rogue(ctx, "alice", &stranger, b.public_key);
    s.connect((*bob)->endpoint());
    s.send(zmq::str_buffer("HELLO"), zmq::send_flags::dontwait);
    REQUIRE(eventually([&] { return (refused = (*bob)->stats().refused_peers) >= 1; }));
  }
  SECTION("another cluster's key under an id of ours") {
    auto s = rogue(ctx, "alice", &*foreign, b.public_key);
    s.connect((*bob)->endpoint());
    s.send(zmq::str_buffer("HELLO"), zmq::send_flags::dontwait);
    REQUIRE(eventually([&] { return (refused = (*bob)->stats().refused_peers) >= 1; }));
  }
  SECTION("no CURVE at all") {
    auto s = rogue(ctx, "alice", nullptr, "");
    s.connect((*bob)->endpoint());
    s.send(zmq::str_buffer("HELLO"), zmq::send_flags::dontwait);
    REQUIRE(eventually([&] { return (refused = (*bob)->stats().refused_peers) >= 1; }));
  }
  // libzmq retries the handshake: the count grows, the handler never hears a byte.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(ib.size() == 0);
  CHECK((*bob)->stats().received == 0);
}

TEST_CASE("channel: a listed key under another instance's routing id is refused", "[curve]") {
  const auto b = pair(), c = pair();
  auto servers = std::make_shared<std::map<std::string, std::string>>();
  Inbox ib;
  auto bob = ControlChannel::start(keyed("bob", b, {{b.public_key, "bob"}, {c.public_key, "carol"}}, servers),
                                   ib.handler());
  REQUIRE(bob);
  zmq::context_t ctx;
  auto s = rogue(ctx, "router", &c, b.public_key);  // carol's key, claiming to be the router
  s.connect((*bob)->endpoint());
  s.send(zmq::str_buffer("HELLO"), zmq::send_flags::dontwait);
  REQUIRE(eventually([&] { return (*bob)->stats().refused_peers >= 1; }));
  auto honest = rogue(ctx, "carol", &c, b.public_key);
  honest.connect((*bob)->endpoint());
  honest.send(zmq::str_buffer("HELLO"), zmq::send_flags::dontwait);
  REQUIRE(eventually([&] { return ib.size() == 1; }));
  CHECK(ib.frames[0].first == "carol");
}

TEST_CASE("channel: a client with the wrong server key gets no connection and sees the peer lost",
          "[curve]") {
  const auto a = pair(), b = pair(), impostor = pair();
  const std::map<std::string, std::string> allowed = {{a.public_key, "alice"}, {b.public_key, "bob"}};
  auto servers = std::make_shared<std::map<std::string, std::string>>();
  Inbox ia, ib;
  std::atomic<int> lost{0};
  auto alice = ControlChannel::start(keyed("alice", a, allowed, servers), ia.handler(),
                                     [&](const std::string&) { ++lost; });
  auto bob = ControlChannel::start(keyed("bob", b, allowed, servers), ib.handler());
  REQUIRE(alice);
  REQUIRE(bob);
  (*servers)[(*bob)->endpoint()] = impostor.public_key;  // alice believes bob holds another key
  (*alice)->send((*bob)->endpoint(), {'h', 'i'});
  REQUIRE(eventually([&] { return lost.load() >= 1; }));
  CHECK(ib.size() == 0);
  SECTION("and no key at all: the frame is dropped, nothing is sent") {
    (*alice)->send("tcp://127.0.0.1:1", {'h', 'i'});
    REQUIRE(eventually([&] { return (*alice)->stats().dropped_send >= 1; }));
  }
}

// A plain channel polls no CURVE sockets: a null poll item would watch fd 0, and with stdin closed (a
// hung-up pipe) every poll would return at once and the I/O thread would spin.
TEST_CASE("channel: an idle plain channel sleeps even when stdin is a hung-up pipe", "[curve]") {
  // stdin = a pipe whose writer is gone: polling it reports POLLHUP at once, every time.
  const int saved = ::dup(0);
  int p[2];
  REQUIRE(::pipe(p) == 0);
  ::close(p[1]);
  ::dup2(p[0], 0);
  ::close(p[0]);
  ChannelConfig c;
  c.identity = "idle";
  c.bind_endpoint = "tcp://127.0.0.1:*";
  Inbox inbox;
  auto ch = ControlChannel::start(c, inbox.handler());
  REQUIRE(ch);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto cpu_ms = [] {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000.0 +
           (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1000.0;
  };
  const double before = cpu_ms();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double used = cpu_ms() - before;
  (*ch)->stop();
  ::dup2(saved, 0);
  ::close(saved);
  CHECK(used < 100);
}

TEST_CASE("keygen: key files round trip and cluster.pub lists every id", "[curve]") {
  TempDir dir;
  auto written = write_cluster_keys(dir.path, {"router", "prefill-0"}, false);
  REQUIRE(written);
  CHECK(written->size() == 3);
  struct stat st {};
  REQUIRE(::stat((dir.path / "router.key").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  auto router = read_curve_key_file(dir.path / "router.key");
  REQUIRE(router);
  auto listed = read_authorized_keys(dir.path / "cluster.pub");
  REQUIRE(listed);
  REQUIRE(listed->size() == 2);
  CHECK(listed->at(1) == std::make_pair(std::string("router"), router->public_key));
  // No silent overwrite; --force replaces; another id is added next to the others.
  auto again = write_cluster_keys(dir.path, {"router"}, false);
  REQUIRE(!again);
  CHECK(again.error().detail.find("--force") != std::string::npos);
  REQUIRE(write_cluster_keys(dir.path, {"router"}, true));
  CHECK(read_curve_key_file(dir.path / "router.key")->public_key != router->public_key);
  REQUIRE(write_cluster_keys(dir.path, {"decode-0"}, false));
  CHECK(read_authorized_keys(dir.path / "cluster.pub")->size() == 3);
  SECTION("a secret readable by others is refused") {
    ::chmod((dir.path / "router.key").c_str(), 0644);
    auto r = read_curve_key_file(dir.path / "router.key");
    REQUIRE(!r);
    CHECK(r.error().detail.find("group or others") != std::string::npos);
  }
  SECTION("a malformed or mismatched key file is refused") {
    std::ofstream(dir.path / "bad.key") << "public = \"short\"\n";
    ::chmod((dir.path / "bad.key").c_str(), 0600);
    CHECK(!read_curve_key_file(dir.path / "bad.key"));
    const auto other = pair();
    std::ofstream(dir.path / "mixed.key")
        << "public = \"" << other.public_key << "\"\nsecret = \"" << router->secret_key << "\"\n";
    ::chmod((dir.path / "mixed.key").c_str(), 0600);
    auto r = read_curve_key_file(dir.path / "mixed.key");
    REQUIRE(!r);
    CHECK(r.error().detail.find("is not the public key") != std::string::npos);
  }
}
