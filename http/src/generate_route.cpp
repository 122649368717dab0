// POST /v1/generate, epd's native route: the whole answer in one JSON object with token ids, the instances
// that served it and stage timings (docs/http-api.md). Shares the router path with the OpenAI routes.
#include "api_context.hpp"
#include "http_reply.hpp"

namespace epd::http {
namespace {

class CollectSink final : public GenerationSink {
 public:
  CollectSink(std::shared_ptr<ApiContext> ctx, ExchangePtr ex, std::string request_id, bool logprobs)
      : ctx_(std::move(ctx)), ex_(std::move(ex)), request_id_(std::move(request_id)), logprobs_(logprobs) {}

  void on_tokens(std::span<const uint32_t>) override {}  // the final answer carries them all

  void on_done(GenerateResponse r) override {
    std::vector<HttpHeader> headers{{"X-Request-Id", request_id_}};
    const auto tokens = uint32_t(r.tokens.size());
    if (r.http_status == 200) {
      note_finished(*ctx_, "/v1/generate", request_id_, false, r, tokens, nullptr);
      reply_json(*ex_, 200, generate_reply_json(r, logprobs_), std::move(headers));
    } else {
      const HttpError failure = failure_error(r);
      note_finished(*ctx_, "/v1/generate", request_id_, false, r, tokens, &failure);
      reply_failure(*ex_, r, std::move(headers));
    }
    ctx_->finished();
  }

 private:
  std::shared_ptr<ApiContext> ctx_;
  ExchangePtr ex_;
  std::string request_id_;
  bool logprobs_ = false;
};

}  // namespace

void handle_generate(const std::shared_ptr<ApiContext>& ctx, ExchangePtr ex) {
  auto id = admit_generation(*ctx, *ex);
  if (!id) return;
  std::vector<HttpHeader> headers{{"X-Request-Id", *id}};
  auto parsed = parse_generate_request(ex->request().body, ctx->config.generate);
  if (auto* err = std::get_if<HttpError>(&parsed)) return reply_error(*ex, *err, std::move(headers));
  auto& request = std::get<GenerateRequest>(parsed);
  request.request_id = *id;
  ctx->started();
  const bool logprobs = request.sampling.logprobs;
  const uint64_t ticket =
      ctx->service.generate(std::move(request), std::make_shared<CollectSink>(ctx, ex, *id, logprobs));
  ex->on_disconnect([ctx, ticket] { ctx->service.cancel(ticket, "the client disconnected"); });
}

}  // namespace epd::http
