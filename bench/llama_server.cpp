#include "llama_server.hpp"

#include <fcntl.h>
#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "epd/launcher/free_port.hpp"
#include "epd/launcher/output_sink.hpp"
#include "llama_baseline.hpp"

namespace epd::bench {

std::unique_ptr<LlamaServer> LlamaServer::start(const LlamaServerOptions& o) {
  const auto dir = llama_tools_dir("llama-server");
  if (!dir) return nullptr;
  std::unique_ptr<LlamaServer> s(new LlamaServer);
  s->port_ = launcher::free_port();
  // Its defaults otherwise (continuous batching, the prompt cache, F16 KV, a unified KV buffer): what a user
  // who starts it on these files gets.
  std::vector<std::string> argv{*dir + "/llama-server",
                                "-m",
                                o.model,
                                "-t",
                                std::to_string(o.threads),
                                "-tb",
                                std::to_string(o.threads),
                                "-np",
                                std::to_string(o.parallel),
                                "-c",
                                std::to_string(uint64_t(o.parallel) * o.ctx_per_slot),
                                "--host",
                                "127.0.0.1",
                                "--port",
                                std::to_string(s->port_),
                                "--no-webui"};
  if (!o.mmproj.empty()) argv.insert(argv.end(), {"--mmproj", o.mmproj});
  for (const auto& a : argv) s->command_ += (s->command_.empty() ? "" : " ") + a;
  const int log = ::open(o.log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log < 0) {
    std::fprintf(stderr, "cannot write %s\n", o.log_file.c_str());
    return nullptr;
  }
  launcher::GroupOptions opts;
  opts.restart.enabled = false;
  s->group_ = std::make_unique<launcher::ProcessGroup>(opts, std::make_shared<launcher::FdSink>(log));
  if (auto st = s->group_->start({{"llama-server", argv}}); !st) {
    std::fprintf(stderr, "cannot start llama-server: %s\n", st.error().to_string().c_str());
    return nullptr;
  }
  httplib::Client c("127.0.0.1", s->port_);
  for (int i = 0; i < 1200; ++i) {  // loading a large model takes a while
    if (auto r = c.Get("/health"); r && r->status == 200) return s;
    if (s->group_->alive() == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::fprintf(stderr, "llama-server did not become ready (its log: %s)\n", o.log_file.c_str());
  return nullptr;
}

pid_t LlamaServer::pid() const {
  auto st = group_->status("llama-server");
  return st ? st->pid : 0;
}

}  // namespace epd::bench
