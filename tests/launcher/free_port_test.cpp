#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "epd/launcher/free_port.hpp"

namespace {

// What Node's fetch (the OpenAI SDK's transport) says when asked for http://127.0.0.1:<port>/.
std::string node_fetch_error(int port) {
  const std::string cmd =
      "node -e \"fetch('http://127.0.0.1:" + std::to_string(port) +
      "/').then(() => console.log('answered'), e => console.log(e.cause?.message ?? e))\" 2>&1";
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    ::pclose(p);
  }
  return out;
}

}  // namespace

TEST_CASE("free_port never hands out a port that Node fetch refuses as a bad port", "[launcher]") {
  using epd::launcher::fetch_blocks_port;
  // The one bad port inside free_port's range (10000 up to the ephemeral range), and some outside it.
  for (int port : {10080, 6000, 6697, 1, 2049}) {
    INFO(port);
    CHECK(fetch_blocks_port(port));
    CHECK(node_fetch_error(port).find("bad port") != std::string::npos);
  }
  for (int port : {10079, 10081, 8080, 32767}) {
    INFO(port);
    CHECK_FALSE(fetch_blocks_port(port));
    CHECK(node_fetch_error(port).find("bad port") == std::string::npos);  // refused or answered, not barred
  }
  for (int i = 0; i < 200; ++i) {
    const int port = epd::launcher::free_port();
    CHECK(port >= 10000);
    CHECK_FALSE(fetch_blocks_port(port));
  }
}

TEST_CASE("free_port never hands out a port another live process was given", "[launcher]") {
  (void)epd::launcher::free_port();  // the child inherits this state: unclaimed, it would pick as we do
  int ports[2], hold[2];
  REQUIRE(::pipe(ports) == 0);
  REQUIRE(::pipe(hold) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(ports[0]);
    ::close(hold[1]);
    for (int i = 0; i < 500; ++i) {
      const int p = epd::launcher::free_port();
      if (::write(ports[1], &p, sizeof p) != ssize_t(sizeof p)) ::_exit(1);
    }
    ::close(ports[1]);
    char c;
    while (::read(hold[0], &c, 1) > 0) {
    }
    ::_exit(0);  // lives, holding its ports, until the parent closes `hold`
  }
  ::close(ports[1]);
  ::close(hold[0]);
  std::set<int> theirs;
  int p = 0;
  while (::read(ports[0], &p, sizeof p) == ssize_t(sizeof p)) theirs.insert(p);
  ::close(ports[0]);
  CHECK(theirs.size() == 500);
  std::vector<int> shared;
  for (int i = 0; i < 1000; ++i)
    if (const int mine = epd::launcher::free_port(); theirs.count(mine)) shared.push_back(mine);
  CHECK(shared.empty());
  ::close(hold[1]);
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFEXITED(status));
}
