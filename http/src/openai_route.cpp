// POST /v1/completions and POST /v1/chat/completions: OpenAI's request in, the router's tokens out, either
// as one JSON answer or as Server-Sent Events while decode produces them (docs/http-api.md). Stop strings
// end the answer here and cancel the rest of the work.
#include <ctime>
#include <mutex>

#include <spdlog/spdlog.h>

#include "api_context.hpp"
#include "epd/http/openai_reply.hpp"
#include "epd/http/openai_request.hpp"
#include "epd/http/text_stream.hpp"
#include "epd/model/image_codec.hpp"
#include "epd/model/prompt_codec.hpp"

namespace epd::http {
namespace {

using openai::Endpoint;
using openai::FinishReason;

constexpr const char* kJson = "application/json";

// Hears one generation's tokens (router thread) and writes the answer; a stop string or the client's
// departure ends it early. All state under one lock: the ticket arrives from the HTTP thread.
class OpenAiSink final : public GenerationSink {
 public:
  OpenAiSink(std::shared_ptr<ApiContext> ctx, ExchangePtr ex, openai::ResponseHead head, bool stream,
             bool include_usage, std::vector<std::string> stop, std::string request_id)
      : ctx_(std::move(ctx)),
        ex_(std::move(ex)),
        head_(head),
        stream_(stream),
        renderer_(std::move(head), include_usage),
        text_(std::move(stop)),
        tokens_text_(ctx_->service.codec()),
        request_id_(std::move(request_id)) {}

  void set_ticket(uint64_t ticket) {
    std::lock_guard lock(mu_);
    ticket_ = ticket;
    if (cancel_wanted_) ctx_->service.cancel(ticket_, "a stop string ended the answer");
  }

  void on_tokens(std::span<const uint32_t> tokens) override {
    std::lock_guard lock(mu_);
    if (answered_ || stopped_) return;
    for (uint32_t t : tokens) {
      ++completion_tokens_;
      const model::TokenId id = t;
      auto delta = text_.push(tokens_text_.push(id));
      emit(delta.text);
      if (delta.stopped) {
        stop_early();
        return;
      }
    }
  }

  void on_done(GenerateResponse r) override {
    std::lock_guard lock(mu_);
    ctx_->finished();
    if (answered_) return;
    answered_ = true;
    openai::Extras extras;
    extras.request_id = request_id_;
    extras.room = r.room;
    extras.attempts = r.attempts;
    extras.first_token_ms = r.timings.first_token_ms;
    extras.total_ms = r.timings.total_ms;
    // Noted before the answer goes out, so a client that reads /v1/activity after its answer finds it.
    if (stopped_) {
      note(r, nullptr);
      return complete(FinishReason::stop, {r.prompt_tokens, completion_tokens_}, extras);
    }
    if (r.http_status != 200) {
      const HttpError failure = failure_error(r);
      note(r, &failure);
      if (headers_sent_) {
        ex_->send(renderer_.error(failure_error(r)));
        ex_->end_stream();
      } else {
        reply_failure(*ex_, r, {{"X-Request-Id", request_id_}});
      }
      return;
    }
    note(r, nullptr);
    emit(text_.push(tokens_text_.finish()).text);  // a character the last token left unfinished
    auto tail = text_.finish();                    // stopped already: no text, stopped
    emit(tail.text);
    const FinishReason reason = tail.stopped || r.ended_at_eos ? FinishReason::stop : FinishReason::length;
    complete(reason, {r.prompt_tokens, completion_tokens_}, extras);
  }

 private:
  void note(const GenerateResponse& r, const HttpError* failure) {
    const char* route = head_.endpoint == Endpoint::chat ? "/v1/chat/completions" : "/v1/completions";
    note_finished(*ctx_, route, request_id_, stream_, r, completion_tokens_, failure);
  }

  void emit(const std::string& text) {
    if (!stream_) {
      body_ += text;
      return;
    }
    if (!headers_sent_) {
      ex_->begin_stream(200, "text/event-stream", {{"X-Request-Id", request_id_}});
      ex_->send(renderer_.start());
      headers_sent_ = true;
    }
    if (!text.empty()) ex_->send(renderer_.text(text));
  }

  // A stop string was reached: stop the router's work; its answer to the cancel (with the prompt's length
  // and the room) completes ours, one actor round trip later.
  void stop_early() {
    stopped_ = true;
    if (ticket_ != 0)
      ctx_->service.cancel(ticket_, "a stop string ended the answer");
    else
      cancel_wanted_ = true;
  }

  void complete(FinishReason reason, const openai::Usage& usage, const openai::Extras& extras) {
    if (stream_) {
      emit({});  // a stream that produced no text still sends its head and role chunk
      ex_->send(renderer_.finish(reason, usage, extras));
      ex_->end_stream();
      return;
    }
    ex_->respond(200, openai::completion_body(head_, body_, reason, usage, extras), kJson,
                 {{"X-Request-Id", request_id_}});
  }

  std::mutex mu_;
  std::shared_ptr<ApiContext> ctx_;
  ExchangePtr ex_;
  const openai::ResponseHead head_;
  const bool stream_;
  openai::StreamRenderer renderer_;
  TextStream text_;                    // stop strings, on the text
  model::GenerationText tokens_text_;  // tokens to text, with the model's detokenizer
  const std::string request_id_;
  std::string body_;  // the answer so far, when not streaming
  uint64_t ticket_ = 0;
  bool cancel_wanted_ = false;
  bool headers_sent_ = false;
  bool answered_ = false;
  bool stopped_ = false;  // a stop string was reached; the rest of the tokens are not wanted
  uint32_t completion_tokens_ = 0;
};

// The chat messages as the model's turns, each image decoded and shipped as PPM; the model's codec decides
// how many it takes.
std::optional<HttpError> to_turns(openai::Request& in, const GenerateLimits& limits, GenerateRequest& out) {
  for (size_t i = 0; i < in.messages.size(); ++i) {
    auto& m = in.messages[i];
    model::ChatTurn turn;
    turn.role = m.role == "developer" ? "system" : m.role;  // OpenAI's newer name for the system turn
    turn.text = std::move(m.text);
    turn.image = !m.images.empty();
    if (out.images_ppm.size() + m.images.size() > limits.max_images)
      return HttpError{400, "invalid_request",
                       "a request may carry at most " + std::to_string(limits.max_images) + " images",
                       "messages[" + std::to_string(i) + "].content"};
    for (const auto& bytes : m.images) {
      auto image = model::decode_image(bytes, limits.max_image_bytes);
      if (!image)
        return HttpError{400, "invalid_request", "image: " + image.error().detail,
                         "messages[" + std::to_string(i) + "].content"};
      out.images_ppm.push_back(model::encode_ppm(*image));
    }
    out.messages.push_back(std::move(turn));
  }
  return std::nullopt;
}

void handle_openai(const std::shared_ptr<ApiContext>& ctx, ExchangePtr ex, Endpoint endpoint) {
  auto id = admit_generation(*ctx, *ex);
  if (!id) return;
  std::vector<HttpHeader> headers{{"X-Request-Id", *id}};
  const auto& g = ctx->config.generate;
  openai::Limits limits;
  limits.max_prompt_bytes = g.max_prompt_bytes;
  limits.max_image_bytes = g.max_image_bytes;
  limits.default_max_tokens = g.default_max_tokens;
  limits.max_tokens_limit = g.max_tokens_limit;
  limits.max_json_depth = g.max_json_depth;
  auto parsed = openai::parse_request(endpoint, ex->request().body, limits);
  if (auto* err = std::get_if<HttpError>(&parsed)) return reply_error(*ex, *err, std::move(headers));
  auto& in = std::get<openai::Request>(parsed);
  const std::string model = ctx->service.model_id();
  if (!in.model.empty() && in.model != model)
    return reply_error(
        *ex,
        {404, "model_not_found",
         "the model '" + in.model + "' is not served here; GET /v1/models lists '" + model + "'", "model"},
        std::move(headers));

  GenerateRequest request;
  request.request_id = *id;
  request.max_tokens = in.max_tokens;
  request.sampling = in.sampling;
  if (auto bad = model::validate(request.sampling); !bad)
    return reply_error(*ex, {400, "invalid_request", bad.error().detail}, std::move(headers));
  if (endpoint == Endpoint::chat) {
    if (auto err = to_turns(in, g, request)) return reply_error(*ex, *err, std::move(headers));
  } else {
    request.prompt = std::move(in.prompt);
  }

  openai::ResponseHead head;
  head.endpoint = endpoint;
  head.id = openai::response_id(endpoint, random_hex(24));
  head.created = int64_t(std::time(nullptr));
  head.model = model;
  auto sink = std::make_shared<OpenAiSink>(ctx, ex, std::move(head), in.stream, in.include_usage,
                                           std::move(in.stop), *id);
  ctx->started();
  const uint64_t ticket = ctx->service.generate(std::move(request), sink);
  sink->set_ticket(ticket);
  ex->on_disconnect([ctx, ticket] { ctx->service.cancel(ticket, "the client disconnected"); });
}

}  // namespace

void handle_completions(const std::shared_ptr<ApiContext>& ctx, ExchangePtr ex) {
  handle_openai(ctx, std::move(ex), Endpoint::completions);
}

void handle_chat(const std::shared_ptr<ApiContext>& ctx, ExchangePtr ex) {
  handle_openai(ctx, std::move(ex), Endpoint::chat);
}

}  // namespace epd::http
