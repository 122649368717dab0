#include "epd/http/http_request.hpp"

#include <nlohmann/json.hpp>

#include "epd/http/base64.hpp"
#include "epd/http/openai_request.hpp"
#include "json_body.hpp"
#include "sampling_fields.hpp"

namespace epd::http {
namespace {

using nlohmann::json;

HttpError bad_request(std::string message) {
  return HttpError{400, "invalid_request", std::move(message)};
}
HttpError too_large(std::string message) {
  return HttpError{413, "oversized", std::move(message)};
}

const char* type_name(const json& v) {
  return v.type_name();
}

}  // namespace

std::variant<GenerateRequest, HttpError> parse_generate_request(std::string_view body,
                                                                const GenerateLimits& limits) {
  auto parsed = parse_json_object(body, limits.max_json_depth);
  if (auto* err = std::get_if<HttpError>(&parsed)) return *err;
  const json& doc = std::get<json>(parsed);

  GenerateRequest request;

  auto prompt = doc.find("prompt");
  auto ids = doc.find("prompt_tokens");
  if (ids != doc.end() && !ids->is_null()) {
    // Token ids instead of text (checkpoint models until their tokenizer is wired).
    if (prompt != doc.end() && !prompt->is_null())
      return bad_request("give \"prompt\" or \"prompt_tokens\", not both");
    if (!ids->is_array() || ids->empty())
      return bad_request("\"prompt_tokens\" must be a non-empty array of token ids");
    // 4 bytes a token at least: the same bound as a text prompt's.
    if (ids->size() > limits.max_prompt_bytes / 4)
      return too_large("\"prompt_tokens\" has " + std::to_string(ids->size()) + " ids; the limit is " +
                       std::to_string(limits.max_prompt_bytes / 4));
    for (const json& id : *ids) {
      if (!id.is_number_unsigned() || id.get<uint64_t>() > UINT32_MAX)
        return bad_request("\"prompt_tokens\" must hold token ids (integers >= 0), got " + id.dump());
      request.prompt_tokens.push_back(static_cast<uint32_t>(id.get<uint64_t>()));
    }
  } else if (prompt == doc.end() || prompt->is_null()) {
    return bad_request("\"prompt\" is required (a non-empty string)");
  } else {
    if (!prompt->is_string()) {
      return bad_request(std::string("\"prompt\" must be a string, got ") + type_name(*prompt));
    }
    const auto& text = prompt->get_ref<const std::string&>();
    if (text.empty()) return bad_request("\"prompt\" must not be empty");
    if (text.size() > limits.max_prompt_bytes) {
      return too_large("\"prompt\" is " + std::to_string(text.size()) + " bytes; the limit is " +
                       std::to_string(limits.max_prompt_bytes) + " bytes");
    }
    request.prompt = text;
  }

  request.max_tokens = limits.default_max_tokens;
  if (auto it = doc.find("max_tokens"); it != doc.end() && !it->is_null()) {
    std::string range = "1.." + std::to_string(limits.max_tokens_limit);
    if (!it->is_number_integer()) {
      return bad_request("\"max_tokens\" must be an integer in " + range + ", got " + type_name(*it));
    }
    bool in_range = it->is_number_unsigned()
                        ? it->get<uint64_t>() >= 1 && it->get<uint64_t>() <= limits.max_tokens_limit
                        : false;  // a signed value here is negative
    if (!in_range) return bad_request("\"max_tokens\" is " + it->dump() + "; it must be in " + range);
    request.max_tokens = static_cast<uint32_t>(it->get<uint64_t>());
  }

  // Sampling, with the OpenAI routes' types and ranges; greedy unless "temperature" > 0.
  SamplingFields sampling;
  if (auto e = parse_sampling_fields(doc, sampling)) return *e;
  request.sampling = sampling.params;

  // "logprobs": N (0..20): each token's log-probability and its N most likely alternatives.
  if (auto it = doc.find("logprobs"); it != doc.end() && !it->is_null()) {
    const std::string range = "0.." + std::to_string(model::kMaxTopLogprobs);
    if (!it->is_number_unsigned() || it->get<uint64_t>() > model::kMaxTopLogprobs)
      return bad_request("\"logprobs\" must be an integer in " + range + " (alternatives per token), got " +
                         it->dump());
    request.sampling.logprobs = true;
    request.sampling.top_logprobs = uint32_t(it->get<uint64_t>());
  }

  // A GBNF grammar the answer follows (llama-server's "grammar"); the router parses it.
  if (auto it = doc.find("grammar"); it != doc.end() && !it->is_null()) {
    if (!it->is_string())
      return bad_request(std::string("\"grammar\" must be a string (GBNF), got ") + type_name(*it));
    const auto& g = it->get_ref<const std::string&>();
    if (g.size() > openai::kMaxConstraintBytes)
      return bad_request("\"grammar\" is " + std::to_string(g.size()) + " bytes; the limit is " +
                         std::to_string(openai::kMaxConstraintBytes) + " bytes");
    request.grammar.gbnf = g;
  }

  // llama-server's "ignore_eos": end tokens do not end the answer, max_tokens does.
  if (auto it = doc.find("ignore_eos"); it != doc.end() && !it->is_null()) {
    if (!it->is_boolean())
      return bad_request(std::string("\"ignore_eos\" must be a boolean, got ") + type_name(*it));
    request.ignore_eos = it->get<bool>();
  }

  // "image": one PPM, or "images": several (a model with an mmproj takes them in order, before the text).
  auto one = doc.find("image");
  auto many = doc.find("images");
  const bool has_one = one != doc.end() && !one->is_null(), has_many = many != doc.end() && !many->is_null();
  if (has_one && has_many) return bad_request("give \"image\" or \"images\", not both");
  if (has_many && !many->is_array()) return bad_request("\"images\" must be an array of base64 strings");
  if (has_many && many->size() > limits.max_images)
    return bad_request("\"images\" has " + std::to_string(many->size()) + " images; the limit is " +
                       std::to_string(limits.max_images));
  std::vector<const json*> images;
  if (has_one) images.push_back(&*one);
  if (has_many)
    for (const json& v : *many) images.push_back(&v);
  for (size_t i = 0; i < images.size(); ++i) {
    const std::string name = has_one ? "\"image\"" : "\"images[" + std::to_string(i) + "]\"";
    const json& v = *images[i];
    if (!v.is_string()) return bad_request(name + " must be a base64 string, got " + type_name(v));
    const auto& b64 = v.get_ref<const std::string&>();
    if (b64.empty()) return bad_request(name + " is empty; omit it to send no image");
    auto bytes = base64_decode(b64, limits.max_image_bytes);
    if (!bytes) {
      const auto& err = bytes.error();
      if (err.code == protocol::ErrorCode::oversized) return too_large(name + ": " + err.detail);
      return bad_request(name + ": " + err.detail);
    }
    // Only the magic is checked here; the model validates dimensions and size against its limits.
    const auto& ppm = *bytes;
    bool p6 = ppm.size() >= 3 && ppm[0] == 'P' && ppm[1] == '6' &&
              (ppm[2] == ' ' || ppm[2] == '\t' || ppm[2] == '\n' || ppm[2] == '\r');
    if (!p6) return bad_request(name + " is not a binary PPM: it must start with \"P6\"");
    request.media.push_back(std::move(*bytes));
  }
  return request;
}

}  // namespace epd::http
