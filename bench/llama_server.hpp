#pragma once
// llama.cpp's llama-server, the program a CPU user would run instead of epd, started on the same GGUF and
// mmproj for `epd-bench serve --compare llama-server`.
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "epd/launcher/process_group.hpp"

namespace epd::bench {

struct LlamaServerOptions {
  std::string model, mmproj;  // mmproj "": text only
  uint32_t threads = 2;       // -t and -tb
  uint32_t parallel = 1;      // slots (continuous batching over them)
  uint32_t ctx_per_slot = 1024;
  std::string log_file;  // its output goes here
};

class LlamaServer {
 public:
  // Builds llama-server once (scripts/llama-tools), starts it on a free port of 127.0.0.1 and waits until
  // GET /health answers 200. Null, after saying why on stderr, if it cannot.
  static std::unique_ptr<LlamaServer> start(const LlamaServerOptions& o);
  ~LlamaServer() { group_->stop(); }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  pid_t pid() const;
  const std::string& command() const { return command_; }  // for the report

 private:
  LlamaServer() = default;
  std::unique_ptr<launcher::ProcessGroup> group_;
  int port_ = 0;
  std::string command_;
};

}  // namespace epd::bench
