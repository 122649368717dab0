#include "llama_server_fields.hpp"

#include <string>
#include <vector>

namespace epd::http::openai {
// Named, not anonymous: the file shares a unity source with the other request parsers.
namespace llama_fields {

enum class Type { number, integer, boolean, string, array, object, any };

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
      {"grammar", Type::string, Effect::if_neutral, "", "a GBNF \"grammar\""},
      {"json_schema", Type::any, Effect::refused, nullptr, "\"json_schema\" (constrained decoding)"},
      {"samplers", Type::any, Effect::refused, nullptr, "\"samplers\" (epd applies one fixed order)"},
      {"mirostat", Type::integer, Effect::if_neutral, 0, "\"mirostat\" sampling"},
      {"typical_p", Type::number, Effect::if_neutral, 1, "\"typical_p\" other than 1"},
      {"repeat_penalty", Type::number, Effect::if_neutral, 1,
       "\"repeat_penalty\" other than 1 (llama.cpp's, over the last repeat_last_n tokens; "
       "repetition_penalty covers the prompt and answer)"},
      {"dry_multiplier", Type::number, Effect::if_neutral, 0,
       "DRY sampling (\"dry_multiplier\" other than 0)"},
      {"xtc_probability", Type::number, Effect::if_neutral, 0,
       "XTC sampling (\"xtc_probability\" other than 0)"},
      {"dynatemp_range", Type::number, Effect::if_neutral, 0, "dynamic temperature (\"dynatemp_range\")"},
      {"min_keep", Type::integer, Effect::if_neutral, 0, "\"min_keep\" other than 0"},
      {"n_probs", Type::integer, Effect::if_neutral, 0, "\"n_probs\" (token probabilities)"},
      {"post_sampling_probs", Type::boolean, Effect::if_neutral, false, "\"post_sampling_probs\""},
      {"ignore_eos", Type::boolean, Effect::if_neutral, false, "\"ignore_eos\": true"},
      {"n_predict", Type::integer, Effect::if_neutral, -1, "\"n_predict\" (send max_tokens)"},
      {"n_cmpl", Type::integer, Effect::if_neutral, 1, "\"n_cmpl\" other than 1"},
      {"n_indent", Type::integer, Effect::if_neutral, 0, "\"n_indent\" other than 0"},
      {"t_max_predict_ms", Type::integer, Effect::if_neutral, 0, "a time limit (\"t_max_predict_ms\")"},
      {"return_tokens", Type::boolean, Effect::if_neutral, false, "\"return_tokens\": true"},
      {"timings_per_token", Type::boolean, Effect::if_neutral, false, "\"timings_per_token\": true"},
      {"return_progress", Type::boolean, Effect::if_neutral, false, "\"return_progress\": true"},
      {"response_fields", Type::array, Effect::if_neutral, json::array(), "\"response_fields\""},
      {"lora", Type::array, Effect::if_neutral, json::array(), "LoRA adapters (\"lora\")"},
      {"image_data", Type::array, Effect::if_neutral, json::array(),
       "\"image_data\" (send images as image_url content parts)"},
      {"chat_template_kwargs", Type::object, Effect::if_neutral, json::object(), "\"chat_template_kwargs\""},
      // Switched off unless their sampler is on (refused above), or without effect on the answer.
      {"repeat_last_n", Type::integer, Effect::none, nullptr, ""},
      {"dry_base", Type::number, Effect::none, nullptr, ""},
      {"dry_allowed_length", Type::integer, Effect::none, nullptr, ""},
      {"dry_penalty_last_n", Type::integer, Effect::none, nullptr, ""},
      {"dry_sequence_breakers", Type::array, Effect::none, nullptr, ""},
      {"xtc_threshold", Type::number, Effect::none, nullptr, ""},
      {"mirostat_tau", Type::number, Effect::none, nullptr, ""},
      {"mirostat_eta", Type::number, Effect::none, nullptr, ""},
      {"dynatemp_exponent", Type::number, Effect::none, nullptr, ""},
      {"n_keep", Type::integer, Effect::none, nullptr, ""},            // epd never shifts the context
      {"cache_prompt", Type::boolean, Effect::none, nullptr, ""},      // the prefix cache keeps answers equal
      {"n_cache_reuse", Type::integer, Effect::none, nullptr, ""},     // likewise
      {"id_slot", Type::integer, Effect::none, nullptr, ""},           // no slots: the router places
      {"sse_ping_interval", Type::number, Effect::none, nullptr, ""},  // transport only
  };
  return table;
}

const char* type_text(Type t) {
  switch (t) {
    case Type::number:
      return "a number";
    case Type::integer:
      return "an integer";
    case Type::boolean:
      return "a boolean";
    case Type::string:
      return "a string";
    case Type::array:
      return "an array";
    case Type::object:
      return "an object";
    case Type::any:
      break;
  }
  return "a value";
}

bool has_type(const nlohmann::json& v, Type t) {
  switch (t) {
    case Type::number:
      return v.is_number();
    case Type::integer:
      return v.is_number_integer();
    case Type::boolean:
      return v.is_boolean();
    case Type::string:
      return v.is_string();
    case Type::array:
      return v.is_array();
    case Type::object:
      return v.is_object();
    case Type::any:
      break;
  }
  return true;
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
    if (!has_type(*v, r.type)) return wrong_type(r.name, type_text(r.type), *v);
    if (r.effect == Effect::refused || (r.effect == Effect::if_neutral && !neutral(*v, r.neutral)))
      return unsupported(r.name, r.what);
  }
  return {};
}

}  // namespace epd::http::openai
