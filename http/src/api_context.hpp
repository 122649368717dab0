#pragma once
// State shared by the HTTP API's routes and the sinks of the generations they started. Sinks outlive a
// request's handler (the router holds them), so they hold the context by shared_ptr.
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "epd/http/activity_log.hpp"
#include "epd/http/http_api.hpp"
#include "epd/http/http_server.hpp"
#include "epd/http/router_service.hpp"

namespace epd::http {

struct ApiContext {
  ApiContext(RouterService& s, const HttpApiConfig& c)
      : service(s), config(c), activity(c.activity_entries) {}

  RouterService& service;
  const HttpApiConfig& config;
  std::atomic<bool> draining{false};
  ActivityLog activity;                              // GET /v1/activity: the generations the sinks answered
  std::atomic<uint64_t> unauthorized{0};             // 401s for a missing or wrong API key
  AuthThrottle auth_throttle{config.auth_throttle};  // 429s for addresses that failed too often

  // Generations started and not yet answered; drain() waits for zero.
  void started() {
    std::lock_guard lock(mu_);
    ++in_flight_;
  }
  void finished() {
    std::lock_guard lock(mu_);
    if (--in_flight_ == 0) idle_.notify_all();
  }
  size_t in_flight() const {
    std::lock_guard lock(mu_);
    return in_flight_;
  }
  template <class Duration>
  size_t wait_idle(Duration d) {
    std::unique_lock lock(mu_);
    idle_.wait_for(lock, d, [&] { return in_flight_ == 0; });
    return in_flight_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable idle_;
  size_t in_flight_ = 0;
};

// The generation routes' request id: the client's X-Request-Id (1..128 visible ASCII characters) or a
// fresh random one. nullopt: the client's is unusable.
std::optional<std::string> request_id_of(const HttpRequest& request);
// `digits` random lowercase hex digits (ids of requests and responses; unique, not secret).
std::string random_hex(size_t digits);

// The first step of every generation route: the request's id, or the reply already sent (a bad
// X-Request-Id, or 503 while draining). The id's header goes on every later reply too.
// A route's error shape (OpenAI's by default; Anthropic's on /v1/messages).
using ErrorBody = std::string (*)(const HttpError&);
std::optional<std::string> admit_generation(ApiContext& ctx, Exchange& ex, ErrorBody shape = nullptr);

void reply_json(Exchange& ex, int status, std::string body, std::vector<HttpHeader> headers = {});
void reply_error(Exchange& ex, const HttpError& error, std::vector<HttpHeader> headers = {},
                 ErrorBody shape = nullptr);
// A failed GenerateResponse as an HTTP error (status, body, Retry-After).
void reply_failure(Exchange& ex, const GenerateResponse& response, std::vector<HttpHeader> headers = {});
HttpError failure_error(const GenerateResponse& response);

// Notes a generation its sink answered in ctx.activity. `failure`: the error the client got (nullptr when
// it got an answer, also one a stop string ended early); `completion_tokens`: the tokens it was given.
void note_finished(ApiContext& ctx, const char* route, const std::string& request_id, bool stream,
                   const GenerateResponse& response, uint32_t completion_tokens, const HttpError* failure);

// Handlers of the generation routes (each in its own file).
void handle_generate(const std::shared_ptr<ApiContext>& ctx, ExchangePtr ex);
void handle_completions(const std::shared_ptr<ApiContext>& ctx, ExchangePtr ex);
void handle_chat(const std::shared_ptr<ApiContext>& ctx, ExchangePtr ex);
void handle_tokenize(ApiContext& ctx, ExchangePtr ex);
void handle_detokenize(ApiContext& ctx, ExchangePtr ex);
void handle_responses(const std::shared_ptr<ApiContext>& ctx, ExchangePtr ex);
void handle_messages(const std::shared_ptr<ApiContext>& ctx, ExchangePtr ex);
void handle_count_tokens(const std::shared_ptr<ApiContext>& ctx, ExchangePtr ex);

}  // namespace epd::http
