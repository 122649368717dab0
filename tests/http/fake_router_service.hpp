#pragma once
// A RouterService for HTTP tests: echoes the prompt, counts calls, and lets a test replace generate().
#include <atomic>
#include <functional>
#include <mutex>

#include "epd/http/router_service.hpp"

namespace epd::http::test {

class FakeRouterService : public RouterService {
 public:
  std::atomic<int> generate_calls{0};
  std::atomic<bool> is_healthy{true};
  std::function<GenerateResponse(const GenerateRequest&)> on_generate;  // set before starting the server
  std::vector<InstanceView> instance_list;

  GenerateResponse generate(const GenerateRequest& request) override {
    ++generate_calls;
    {
      std::lock_guard lock(mu_);
      last_ = request;
    }
    return on_generate ? on_generate(request) : echo(request);
  }
  std::vector<InstanceView> instances() override { return instance_list; }
  RouterStats stats() override {
    RouterStats s;
    s.requests = 7;
    s.completed = 5;
    s.failed = 1;
    s.retries = 2;
    return s;
  }
  bool healthy() override { return is_healthy; }

  GenerateRequest last_request() {
    std::lock_guard lock(mu_);
    return last_;
  }

  static GenerateResponse echo(const GenerateRequest& request) {
    GenerateResponse r;
    r.text = "echo:" + request.prompt;
    for (size_t i = 0; i < request.prompt.size() && i < request.max_tokens; ++i) {
      r.tokens.push_back(static_cast<uint8_t>(request.prompt[i]));
    }
    r.room = 0xfedcba9876543210ull;
    r.attempts = 1;
    r.encoder = request.image_ppm.empty() ? "" : "encoder-0";
    r.prefill = "prefill-0";
    r.decode = "decode-0";
    r.timings = {1.5, 2.5, 0.25, 3.0, 4.0, 11.0};
    return r;
  }

 private:
  std::mutex mu_;
  GenerateRequest last_;
};

}  // namespace epd::http::test
