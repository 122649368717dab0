// POST /tokenize and POST /detokenize, as llama-server answers them: the served model's tokenizer (the
// byte tokenizer of the reference model), without the chat template.
#include <nlohmann/json.hpp>

#include "api_context.hpp"
#include "epd/http/utf8.hpp"
#include "epd/model/prompt_codec.hpp"
#include "epd/model/tokens.hpp"
#include "json_body.hpp"
#include "openai_fields.hpp"

namespace epd::http {
namespace tokenize_route {

using namespace openai::fields;

// An optional boolean field; a present non-boolean is an error.
Failure flag(const json& body, const char* name, bool& out) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return wrong_type(name, "a boolean", *v);
  out = v->get<bool>();
  return std::nullopt;
}

// The piece as llama-server gives it: a string when it is valid UTF-8, else its bytes.
json piece_json(const std::string& piece) {
  if (to_valid_utf8(piece) == piece) return piece;
  json bytes = json::array();
  for (unsigned char c : piece) bytes.push_back(int(c));
  return bytes;
}

// The body as a JSON object; nullopt when it is not one (the 400 is sent).
std::optional<json> body_of(ApiContext& ctx, Exchange& ex) {
  auto parsed = parse_json_object(ex.request().body, ctx.config.generate.max_json_depth);
  if (auto* e = std::get_if<HttpError>(&parsed)) {
    reply_error(ex, *e);
    return std::nullopt;
  }
  return std::get<json>(std::move(parsed));
}

}  // namespace tokenize_route

void handle_tokenize(ApiContext& ctx, ExchangePtr exchange) {
  using namespace tokenize_route;
  Exchange& ex = *exchange;
  const auto body = body_of(ctx, ex);
  if (!body) return;
  bool add_special = false, parse_special = true, with_pieces = false;
  for (auto [name, out] : {std::pair{"add_special", &add_special}, std::pair{"parse_special", &parse_special},
                           std::pair{"with_pieces", &with_pieces}})
    if (auto e = flag(*body, name, *out)) return reply_error(ex, *e);
  json tokens = json::array();
  if (const json* content = field(*body, "content")) {
    if (!content->is_string())
      return reply_error(ex, wrong_type("content", "a string (epd takes no mixed token arrays)", *content));
    const auto& text = content->get_ref<const std::string&>();
    if (text.size() > ctx.config.generate.max_prompt_bytes)
      return reply_error(
          ex, invalid("content", "\"content\" is longer than " +
                                     std::to_string(ctx.config.generate.max_prompt_bytes) + " bytes"));
    const auto codec = ctx.service.codec();
    std::vector<model::TokenId> ids;
    if (codec) {
      const model::Tokenizer& tok = codec->tokenizer();
      auto encoded = tok.encode(text, parse_special);
      if (!encoded) return reply_error(ex, invalid("content", encoded.error().detail));
      if (add_special && tok.add_bos() && tok.bos()) ids.push_back(*tok.bos());
      ids.insert(ids.end(), encoded->begin(), encoded->end());
    } else {
      // The reference model's bytes: no text spells one of its three special tokens.
      if (add_special) ids.push_back(model::kBos);
      const auto bytes = model::encode_text(text);
      ids.insert(ids.end(), bytes.begin(), bytes.end());
    }
    for (model::TokenId id : ids) {
      if (!with_pieces) {
        tokens.push_back(id);
        continue;
      }
      const std::string piece = codec ? codec->tokenizer().piece(id, /*render_special=*/true)
                                      : model::decode_text(std::span(&id, 1));
      tokens.push_back({{"id", id}, {"piece", piece_json(piece)}});
    }
  }
  reply_json(ex, 200, json{{"tokens", std::move(tokens)}}.dump());
}

void handle_detokenize(ApiContext& ctx, ExchangePtr exchange) {
  using namespace tokenize_route;
  Exchange& ex = *exchange;
  const auto body = body_of(ctx, ex);
  if (!body) return;
  const auto codec = ctx.service.codec();
  const uint32_t vocab = codec ? codec->tokenizer().vocab_size() : model::kVocab;
  std::vector<model::TokenId> ids;
  if (const json* tokens = field(*body, "tokens")) {
    if (!tokens->is_array()) return reply_error(ex, wrong_type("tokens", "an array of token ids", *tokens));
    for (const auto& t : *tokens) {
      if (!t.is_number_unsigned() || t.get<uint64_t>() >= vocab)
        return reply_error(ex, invalid("tokens", "\"tokens\" holds " + t.dump().substr(0, 40) +
                                                     ", not a token id of the model (0.." +
                                                     std::to_string(vocab - 1) + ")"));
      ids.push_back(t.get<model::TokenId>());
    }
  }
  std::string content;
  if (codec) {
    for (model::TokenId id : ids) content += codec->tokenizer().piece(id, /*render_special=*/true);
  } else {
    content = model::decode_text(ids);
  }
  // Bytes that are not UTF-8 (a byte-level token cut out of a character) become U+FFFD: JSON holds text.
  reply_json(ex, 200, json{{"content", to_valid_utf8(content)}}.dump());
}

}  // namespace epd::http
