// POST /v1/messages and POST /v1/messages/count_tokens: Anthropic's Messages API over the same request model
// and answer as Chat Completions (answer.hpp), in Anthropic's shapes (docs/http-api.md).
#include "answer.hpp"
#include "anthropic_reply.hpp"
#include "epd/http/anthropic_request.hpp"
#include "epd/model/media.hpp"
#include "epd/model/prompt_codec.hpp"

namespace epd::http {

void handle_messages(const std::shared_ptr<ApiContext>& ctx, ExchangePtr ex) {
  auto id = admit_generation(*ctx, *ex, anthropic::error_body);
  if (!id) return;
  std::vector<HttpHeader> headers{{"X-Request-Id", *id}};
  auto parsed = anthropic::parse_request(ex->request().body, request_limits(*ctx));
  if (auto* err = std::get_if<HttpError>(&parsed))
    return reply_error(*ex, *err, std::move(headers), anthropic::error_body);
  auto& in = std::get<openai::Request>(parsed);
  PreparedGeneration prepared;
  if (auto err = prepare_generation(*ctx, in, *id, prepared))
    return reply_error(*ex, *err, std::move(headers), anthropic::error_body);
  auto shape = anthropic::make_shape("msg_" + random_hex(24), ctx->service.model_id());
  start_answer(ctx, std::move(ex), std::move(shape), in, std::move(prepared));
}

// The prompt's tokens as the router would make them (template, tools, each image's tokens), nothing run.
void handle_count_tokens(const std::shared_ptr<ApiContext>& ctx, ExchangePtr ex) {
  auto id = admit_generation(*ctx, *ex, anthropic::error_body);
  if (!id) return;
  std::vector<HttpHeader> headers{{"X-Request-Id", *id}};
  auto fail = [&](const HttpError& e) { reply_error(*ex, e, std::move(headers), anthropic::error_body); };
  auto parsed = anthropic::parse_request(ex->request().body, request_limits(*ctx), /*count_tokens=*/true);
  if (auto* err = std::get_if<HttpError>(&parsed)) return fail(*err);
  auto& in = std::get<openai::Request>(parsed);
  PreparedGeneration prepared;
  if (auto err = prepare_generation(*ctx, in, *id, prepared)) return fail(*err);
  const auto codec = ctx->service.codec();
  if (!codec)
    return fail({400, "invalid_request", "this model takes only token ids: it has no chat template"});
  const GenerateRequest& r = prepared.request;
  std::vector<model::MediaDims> dims;
  for (const auto& bytes : r.media) {
    auto item = model::parse_media_item(bytes);
    if (!item) return fail({400, "invalid_request", item.error().detail, "messages"});
    dims.push_back(model::media_dims(*item));
  }
  auto prompt = codec->chat(r.messages, dims, r.tools);
  if (!prompt)
    return fail({prompt.error().code == protocol::ErrorCode::config_error ? 422 : 400,
                 std::string(protocol::error_name(prompt.error().code)), prompt.error().detail});
  reply_json(*ex, 200, anthropic::count_body(prompt->size()), std::move(headers));
}

}  // namespace epd::http
