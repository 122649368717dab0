#include "llama_server_fields.hpp"

#include <string>
#include <vector>

namespace epd::http::openai {
// Named, not anonymous: the file shares a unity source with the other request parsers.
namespace llama_fields {

// A field's JSON type: what a refusal calls it, and the test.
struct Type {
  const char* text;
  bool (*fits)(const nlohmann::json&);
};
using Json = nlohmann::json;
constexpr Type kNumber{"a number", [](const Json& v) { return v.is_number(); }};
constexpr Type kInteger{"an integer", [](const Json& v) { return v.is_number_integer(); }};
constexpr Type kBoolean{"a boolean", [](const Json& v) { return v.is_boolean(); }};
constexpr Type kArray{"an array", [](const Json& v) { return v.is_array(); }};
constexpr Type kObject{"an object", [](const Json& v) { return v.is_object(); }};
constexpr Type kAny{"a value", [](const Json&) { return true; }};

// What a value of a field does to epd's answer.
enum class Effect {
  none,        // nothing, whatever the value (accepted)
  if_neutral,  // nothing at `neutral` (accepted); anything else is refused
  refused,     // any value is refused
};

struct Rule {
  const char* name;
  Type type;
  Effect effect;
  nlohmann::json neutral;  // with if_neutral
  const char* what;        // what the field asks for, in the refusal
};

const std::vector<Rule>& rules() {
  using nlohmann::json;
  static const std::vector<Rule> table{
      {"grammar_lazy", kBoolean, Effect::if_neutral, false, "lazy grammars (\"grammar_lazy\")"},
      {"grammar_triggers", kArray, Effect::if_neutral, json::array(), "\"grammar_triggers\" (lazy grammars)"},
      {"preserved_tokens", kArray, Effect::if_neutral, json::array(), "\"preserved_tokens\""},
      {"samplers", kAny, Effect::refused, nullptr, "\"samplers\" (epd applies one fixed order)"},
      {"mirostat", kInteger, Effect::if_neutral, 0, "\"mirostat\" sampling"},
      {"typical_p", kNumber, Effect::if_neutral, 1, "\"typical_p\" other than 1"},
      {"repeat_penalty", kNumber, Effect::if_neutral, 1,
       "\"repeat_penalty\" other than 1 (llama.cpp's, over the last repeat_last_n tokens; "
       "repetition_penalty covers the prompt and answer)"},
      {"dry_multiplier", kNumber, Effect::if_neutral, 0, "DRY sampling (\"dry_multiplier\" other than 0)"},
      {"xtc_probability", kNumber, Effect::if_neutral, 0, "XTC sampling (\"xtc_probability\" other than 0)"},
      {"dynatemp_range", kNumber, Effect::if_neutral, 0, "dynamic temperature (\"dynatemp_range\")"},
      {"min_keep", kInteger, Effect::if_neutral, 0, "\"min_keep\" other than 0"},
      {"post_sampling_probs", kBoolean, Effect::if_neutral, false, "\"post_sampling_probs\""},
      {"n_predict", kInteger, Effect::if_neutral, -1, "\"n_predict\" (send max_tokens)"},
      {"n_cmpl", kInteger, Effect::if_neutral, 1, "\"n_cmpl\" other than 1"},
      {"n_indent", kInteger, Effect::if_neutral, 0, "\"n_indent\" other than 0"},
      {"t_max_predict_ms", kInteger, Effect::if_neutral, 0, "a time limit (\"t_max_predict_ms\")"},
      {"return_tokens", kBoolean, Effect::if_neutral, false, "\"return_tokens\": true"},
      {"timings_per_token", kBoolean, Effect::if_neutral, false, "\"timings_per_token\": true"},
      {"return_progress", kBoolean, Effect::if_neutral, false, "\"return_progress\": true"},
      {"response_fields", kArray, Effect::if_neutral, json::array(), "\"response_fields\""},
      {"lora", kArray, Effect::if_neutral, json::array(), "LoRA adapters (\"lora\")"},
      {"image_data", kArray, Effect::if_neutral, json::array(),
       "\"image_data\" (send images as image_url content parts)"},
      {"chat_template_kwargs", kObject, Effect::if_neutral, json::object(), "\"chat_template_kwargs\""},
      // Switched off unless their sampler is on (refused above), or without effect on the answer.
      {"repeat_last_n", kInteger, Effect::none, nullptr, ""},
      {"dry_base", kNumber, Effect::none, nullptr, ""},
      {"dry_allowed_length", kInteger, Effect::none, nullptr, ""},
      {"dry_penalty_last_n", kInteger, Effect::none, nullptr, ""},
      {"dry_sequence_breakers", kArray, Effect::none, nullptr, ""},
      {"xtc_threshold", kNumber, Effect::none, nullptr, ""},
      {"mirostat_tau", kNumber, Effect::none, nullptr, ""},
      {"mirostat_eta", kNumber, Effect::none, nullptr, ""},
      {"dynatemp_exponent", kNumber, Effect::none, nullptr, ""},
      {"n_keep", kInteger, Effect::none, nullptr, ""},            // epd never shifts the context
      {"cache_prompt", kBoolean, Effect::none, nullptr, ""},      // the prefix cache keeps answers equal
      {"n_cache_reuse", kInteger, Effect::none, nullptr, ""},     // likewise
      {"id_slot", kInteger, Effect::none, nullptr, ""},           // no slots: the router places
      {"sse_ping_interval", kNumber, Effect::none, nullptr, ""},  // transport only
      {"n_probs", kInteger, Effect::none, nullptr, ""},           // logprobs: openai_request.cpp takes it
  };
  return table;
}

bool neutral(const nlohmann::json& v, const nlohmann::json& n) {
  if (v.is_number() && n.is_number()) return v.get<double>() == n.get<double>();
  return v == n;
}

}  // namespace llama_fields

fields::Failure refuse_llama_server_fields(const nlohmann::json& body) {
  using namespace llama_fields;
  using namespace fields;
  for (const Rule& r : rules()) {
    const nlohmann::json* v = field(body, r.name);
    if (!v) continue;
    if (!r.type.fits(*v)) return wrong_type(r.name, r.type.text, *v);
    if (r.effect == Effect::refused || (r.effect == Effect::if_neutral && !neutral(*v, r.neutral)))
      return unsupported(r.name, r.what);
  }
  return {};
}

}  // namespace epd::http::openai
