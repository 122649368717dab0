// POST /v1/completions and POST /v1/chat/completions: OpenAI's request in, the router's tokens out, either
// as one JSON answer or as Server-Sent Events while decode produces them (docs/http-api.md). Stop strings
// end the answer here and cancel the rest of the work (answer.hpp).
#include <ctime>

#include "answer.hpp"
#include "epd/http/openai_reply.hpp"
#include "epd/http/openai_request.hpp"

namespace epd::http {
namespace {

using openai::Endpoint;

// Chat Completions' and Completions' bodies and chunks (openai_reply.hpp).
class OpenAiShape final : public AnswerShape {
 public:
  OpenAiShape(openai::ResponseHead head, bool include_usage, uint32_t n, bool logprobs)
      : head_(head), renderer_(std::move(head), include_usage, n, logprobs) {}

  const char* route() const override {
    return head_.endpoint == Endpoint::chat ? "/v1/chat/completions" : "/v1/completions";
  }
  std::string start() override { return renderer_.start(); }
  std::string text(std::string_view delta, uint32_t i, std::span<const openai::TokenLogprob> lp) override {
    return renderer_.text(delta, i, lp);
  }
  std::string reasoning(std::string_view delta, uint32_t i) override { return renderer_.reasoning(delta, i); }
  std::string tool_calls(std::span<const model::ToolCall> calls, uint32_t i) override {
    return renderer_.tool_calls(calls, i);
  }
  std::string finish_choice(uint32_t i, openai::FinishReason reason, std::string_view /*stop_sequence*/,
                            const openai::Extras& extras, std::span<const openai::TokenLogprob> lp) override {
    return renderer_.finish_choice(i, reason, extras, lp);
  }
  std::string end(const openai::Usage& usage) override { return renderer_.end(usage); }
  std::string stream_error(const HttpError& e) override { return renderer_.error(e); }
  std::string body(std::span<const openai::Choice> choices, const openai::Usage& usage) override {
    return openai::completion_body(head_, choices, usage);
  }
  std::string error_body(const HttpError& e) const override { return openai::error_body(e); }

 private:
  const openai::ResponseHead head_;
  openai::StreamRenderer renderer_;
};

void handle_openai(const std::shared_ptr<ApiContext>& ctx, ExchangePtr ex, Endpoint endpoint) {
  auto id = admit_generation(*ctx, *ex);
  if (!id) return;
  std::vector<HttpHeader> headers{{"X-Request-Id", *id}};
  auto parsed = openai::parse_request(endpoint, ex->request().body, request_limits(*ctx));
  if (auto* err = std::get_if<HttpError>(&parsed)) return reply_error(*ex, *err, std::move(headers));
  auto& in = std::get<openai::Request>(parsed);
  PreparedGeneration prepared;
  if (auto err = prepare_generation(*ctx, in, *id, prepared))
    return reply_error(*ex, *err, std::move(headers));

  openai::ResponseHead head;
  head.endpoint = endpoint;
  head.id = openai::response_id(endpoint, random_hex(24));
  head.created = int64_t(std::time(nullptr));
  head.model = ctx->service.model_id();
  auto shape = std::make_unique<OpenAiShape>(std::move(head), in.include_usage, in.n,
                                             prepared.request.sampling.logprobs);
  start_answer(ctx, std::move(ex), std::move(shape), in, std::move(prepared));
}

}  // namespace

void handle_completions(const std::shared_ptr<ApiContext>& ctx, ExchangePtr ex) {
  handle_openai(ctx, std::move(ex), Endpoint::completions);
}

void handle_chat(const std::shared_ptr<ApiContext>& ctx, ExchangePtr ex) {
  handle_openai(ctx, std::move(ex), Endpoint::chat);
}

}  // namespace epd::http
