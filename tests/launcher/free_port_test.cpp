#include <catch2/catch.hpp>
#include <cstdio>
#include <string>

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
