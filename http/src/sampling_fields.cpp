#include "sampling_fields.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "openai_fields.hpp"

namespace epd::http {
namespace {

using namespace openai::fields;

Failure number_in(const json& doc, const std::string& name, double low, double high, bool low_open,
                  std::string_view range, float& out) {
  const json* v = field(doc, name);
  if (!v) return {};
  if (!v->is_number()) return wrong_type(name, "a number in " + std::string(range), *v);
  const double x = v->get<double>();
  // Checked as the float the sampler gets: 1e-50 is above 0 but its float is not.
  const float f = static_cast<float>(x);
  if (!std::isfinite(x) || x < low || (low_open && f == static_cast<float>(low)) || x > high)
    return invalid(name, in_quotes(name) + " is " + v->dump() + "; it must be in " + std::string(range));
  out = f;
  return {};
}

}  // namespace

std::optional<HttpError> parse_sampling_fields(const json& doc, SamplingFields& out) {
  auto& p = out.params;
  if (auto e = number_in(doc, "temperature", 0, 2, false, "[0, 2]", p.temperature)) return e;
  if (auto e = number_in(doc, "top_p", 0, 1, true, "(0, 1]", p.top_p)) return e;
  if (auto e = number_in(doc, "min_p", 0, 1, false, "[0, 1]", p.min_p)) return e;
  if (auto e = number_in(doc, "presence_penalty", -2, 2, false, "[-2, 2]", p.presence_penalty)) return e;
  if (auto e = number_in(doc, "frequency_penalty", -2, 2, false, "[-2, 2]", p.frequency_penalty)) return e;
  if (auto e = number_in(doc, "repetition_penalty", 0, 2, true, "(0, 2]", p.repetition_penalty)) return e;
  if (const json* v = field(doc, "top_k")) {
    // vLLM spells "off" as -1 (older releases) or 0; both are taken.
    const char* rule = "it must be 0 or -1 (off) or a positive integer below 2^32";
    if (!v->is_number_integer()) return wrong_type("top_k", "an integer (0 or -1 for off)", *v);
    if (v->is_number_unsigned() ? v->get<uint64_t>() > UINT32_MAX : v->get<int64_t>() != -1)
      return invalid("top_k", "\"top_k\" is " + v->dump() + "; " + rule);
    p.top_k = v->is_number_unsigned() ? static_cast<uint32_t>(v->get<uint64_t>()) : 0;
  }
  if (const json* v = field(doc, "logit_bias")) {
    // OpenAI's shape: {"<token id>": bias, ...}.
    if (!v->is_object()) return wrong_type("logit_bias", "an object of token ids to numbers", *v);
    if (v->size() > kMaxLogitBias)
      return invalid("logit_bias", "\"logit_bias\" has " + std::to_string(v->size()) + " entries; at most " +
                                       std::to_string(kMaxLogitBias) + " are taken");
    for (const auto& [key, bias] : v->items()) {
      uint32_t id = 0;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (key.empty() || ec != std::errc{} || end != key.data() + key.size())
        return invalid("logit_bias", "\"logit_bias\" key \"" + key.substr(0, 20) + "\" is not a token id");
      if (!bias.is_number() || !(bias.get<double>() >= -100 && bias.get<double>() <= 100))
        return invalid("logit_bias", "\"logit_bias\" of token " + key + " is " + bias.dump() +
                                         "; it must be a number in [-100, 100]");
      p.logit_bias.emplace_back(id, static_cast<float>(bias.get<double>()));
    }
  }
  if (const json* v = field(doc, "seed")) {
    if (!v->is_number_integer()) return wrong_type("seed", "an integer", *v);
    // Clients send negative seeds (-1 is common); the sampler needs 64 bits, not a sign.
    p.seed = v->is_number_unsigned() ? v->get<uint64_t>() : static_cast<uint64_t>(v->get<int64_t>());
    out.seed_given = true;
  }
  return {};
}

}  // namespace epd::http
