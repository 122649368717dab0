// transport_peer: a target engine in its own process for the two-process transport tests.
//   transport_peer <instance> <offer: shm,tcp> <regions> <bytes per region>
// Prints "DESC <hex descriptor>" once ready, then answers one line per command on stdin:
//   sum <addr> <len>      -> "SUM <xxh64 as decimal>"
//   fill <addr> <len> <b> -> "OK" (memset to byte b)
//   quit / end of input   -> exits 0
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>

#include "epd/protocol/codec.hpp"
#include "epd/transport/backend_registry.hpp"
#include "epd/transport/engine.hpp"
#include "hex.hpp"

using namespace epd::transport;

int main(int argc, char** argv) {
  // stdout carries the DESC/command protocol; backend log lines (e.g. rdma's device line) go to stderr.
  spdlog::set_default_logger(spdlog::stderr_logger_mt("peer"));
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s <instance> <shm,tcp> <regions> <bytes>\n", argv[0]);
    return 2;
  }
  EngineConfig config;
  config.instance_id = argv[1];
  config.offer.clear();
  std::stringstream offer(argv[2]);
  for (std::string name; std::getline(offer, name, ',');)
    if (epd::transport::find_backend(name)) config.offer.push_back(name);
  auto engine = Engine::create(config);
  if (!engine) {
    std::fprintf(stderr, "engine: %s\n", engine.error().to_string().c_str());
    return 1;
  }
  const int regions = std::stoi(argv[3]);
  const uint64_t bytes = std::stoull(argv[4]);
  for (int i = 0; i < regions; ++i) {
    std::string name = "r";
    name += std::to_string(i);
    if (auto r = (*engine)->allocate(name, bytes); !r) {
      std::fprintf(stderr, "allocate: %s\n", r.error().to_string().c_str());
      return 1;
    }
  }
  std::cout << "DESC " << epd::test::to_hex(epd::protocol::encode_value((*engine)->descriptor()))
            << std::endl;
  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream in(line);
    std::string cmd;
    uint64_t addr = 0, len = 0;
    in >> cmd >> addr >> len;
    if (cmd == "quit") break;
    // Only ranges inside my regions are touched, whatever the test sends.
    if ((cmd == "sum" || cmd == "fill") && !(*engine)->find_local(addr, len)) {
      std::cout << "ERR range" << std::endl;
      continue;
    }
    if (cmd == "sum") {
      std::cout << "SUM " << XXH64(reinterpret_cast<const void*>(addr), len, 0) << std::endl;
    } else if (cmd == "fill") {
      int b = 0;
      in >> b;
      std::memset(reinterpret_cast<void*>(addr), b, len);
      std::cout << "OK" << std::endl;
    } else {
      std::cout << "ERR command" << std::endl;
    }
  }
  return 0;
}
