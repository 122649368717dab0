// POST /v1/responses: OpenAI's Responses API over the same request model and answer as Chat Completions
// (answer.hpp), stateless, in the Responses shapes (docs/http-api.md).
#include <ctime>

#include "answer.hpp"
#include "epd/http/responses_request.hpp"
#include "responses_reply.hpp"

namespace epd::http {

void handle_responses(const std::shared_ptr<ApiContext>& ctx, ExchangePtr ex) {
  auto id = admit_generation(*ctx, *ex);
  if (!id) return;
  std::vector<HttpHeader> headers{{"X-Request-Id", *id}};
  auto parsed = responses::parse_request(ex->request().body, request_limits(*ctx));
  if (auto* err = std::get_if<HttpError>(&parsed)) return reply_error(*ex, *err, std::move(headers));
  auto& [in, settings] = std::get<responses::Parsed>(parsed);
  PreparedGeneration prepared;
  if (auto err = prepare_generation(*ctx, in, *id, prepared))
    return reply_error(*ex, *err, std::move(headers));
  auto shape = responses::make_shape(random_hex(24), int64_t(std::time(nullptr)), ctx->service.model_id(),
                                     std::move(settings));
  start_answer(ctx, std::move(ex), std::move(shape), in, std::move(prepared));
}

}  // namespace epd::http
