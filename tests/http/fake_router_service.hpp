#pragma once
// A RouterService for HTTP tests: echoes the prompt, counts calls, records cancellations, and lets a test
// replace the answer. Each generation is answered from a thread of its own, as the router answers from its
// actor: the tokens first, then the final answer.
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "epd/http/router_service.hpp"

namespace epd::http::test {

class FakeRouterService : public RouterService {
 public:
  std::atomic<int> generate_calls{0};
  std::atomic<bool> throw_in_generate{false};  // generate() itself throws (a bug in the service)
  std::function<void()> before_generate;       // runs inside generate(), on the server's thread
  Readiness ready{true, {}};
  // Computes the answer (on the generation's thread); set before starting the server.
  std::function<GenerateResponse(const GenerateRequest&)> on_generate;
  // Or drives the sink itself (tokens in any pieces, failures after tokens); replaces on_generate.
  std::function<void(const GenerateRequest&, GenerationSink&)> drive;
  std::vector<InstanceView> instance_list;

  ~FakeRouterService() override { join(); }

  uint64_t generate(GenerateRequest request, std::shared_ptr<GenerationSink> sink) override {
    if (throw_in_generate) throw std::runtime_error("boom");
    if (before_generate) before_generate();
    const uint64_t ticket = ++generate_calls;
    {
      std::lock_guard lock(mu_);
      last_ = request;
    }
    std::lock_guard lock(threads_mu_);
    threads_.emplace_back([this, request = std::move(request), sink = std::move(sink)] {
      if (drive) return drive(request, *sink);
      GenerateResponse r = on_generate ? on_generate(request) : echo(request);
      if (r.http_status == 200 && !r.tokens.empty()) sink->on_tokens(r.tokens);
      sink->on_done(std::move(r));
    });
    return ticket;
  }
  void cancel(uint64_t ticket, std::string reason) override {
    std::lock_guard lock(mu_);
    cancels_.emplace_back(ticket, std::move(reason));
  }
  std::vector<InstanceView> instances() override { return instance_list; }
  void stats(std::function<void(RouterStats)> done) override {
    RouterStats s;
    s.requests = 7;
    s.completed = 5;
    s.failed = 1;
    s.retries = 2;
    s.prompt_backlog_tokens = 120;
    s.prompt_tokens_per_s = 250.5;
    done(s);
  }
  Readiness readiness() override { return ready; }
  std::string model_id() override { return "epd-test"; }

  GenerateRequest last_request() {
    std::lock_guard lock(mu_);
    return last_;
  }
  bool cancelled(std::chrono::milliseconds wait) {
    const auto until = std::chrono::steady_clock::now() + wait;
    while (cancels().empty() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return !cancels().empty();
  }
  std::vector<std::pair<uint64_t, std::string>> cancels() {
    std::lock_guard lock(mu_);
    return cancels_;
  }
  void join() {
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(threads_mu_);
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
  }

  static GenerateResponse echo(const GenerateRequest& request) {
    GenerateResponse r;
    r.text = "echo:" + request.prompt;
    for (size_t i = 0; i < request.prompt.size() && i < request.max_tokens; ++i) {
      r.tokens.push_back(static_cast<uint8_t>(request.prompt[i]));
    }
    r.room = 0xfedcba9876543210ull;
    r.attempts = 1;
    r.encoder = request.media.empty() ? "" : "encoder-0";
    r.prefill = "prefill-0";
    r.decode = "decode-0";
    r.timings = {1.5, 2.5, 0.25, 3.0, 4.0, 11.0};
    return r;
  }

 private:
  std::mutex mu_;
  GenerateRequest last_;
  std::vector<std::pair<uint64_t, std::string>> cancels_;
  std::mutex threads_mu_;
  std::vector<std::thread> threads_;
};

}  // namespace epd::http::test
