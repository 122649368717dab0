// Hugging Face tokenizer.json (+ tokenizer_config.json) as byte-level BPE. Supported: model BPE without
// dropout, byte fallback or subword affixes; no normalizer; a ByteLevel pre-tokenizer, alone or after
// Split (Regex/String, Isolated) and Digits steps; ByteLevel or no decoder; TemplateProcessing, ByteLevel
// or no post-processor; added tokens without lstrip/rstrip/single_word. Anything else is refused by name.
#include <nlohmann/json.hpp>

#include "bpe_tokenizer.hpp"
#include "epd/model/tokenizer_load.hpp"

namespace epd::model {
namespace {

using nlohmann::json;

// Hugging Face's ByteLevel regex (GPT-2's, with a last \s+ for whitespace before a non-space).
constexpr const char* kByteLevelRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct Refused {
  std::string what;
};

[[noreturn]] void refuse(std::string what) {
  throw Refused{std::move(what)};
}

std::string type_of(const json& j) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) refuse("an object without a \"type\"");
  return j["type"].get<std::string>();
}

bool flag(const json& j, const char* key, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) refuse(std::string("\"") + key + "\" is not a boolean");
  return j[key].get<bool>();
}

std::string literal_pattern(
    const std::string& s) {  // a String split pattern as a regex matching it literally
  std::string out;
  for (char c : s) {
    if (std::string_view(R"(\^$.|?*+()[]{}-/)").find(c) != std::string_view::npos) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

void add_byte_level(const json& bl, std::vector<std::string>& patterns) {
  if (flag(bl, "add_prefix_space", false)) refuse("ByteLevel add_prefix_space = true is not supported");
  if (flag(bl, "use_regex", true)) patterns.push_back(kByteLevelRegex);
}

std::vector<std::string> pre_tokenizer_patterns(const json& pt) {
  if (pt.is_null()) refuse("no pre_tokenizer (epd supports byte-level BPE only)");
  const std::string t = type_of(pt);
  std::vector<std::string> patterns;
  if (t == "ByteLevel") {
    add_byte_level(pt, patterns);
    if (patterns.empty()) refuse("a ByteLevel pre_tokenizer without its regex splits nothing");
    return patterns;
  }
  if (t != "Sequence" || !pt.contains("pretokenizers") || !pt["pretokenizers"].is_array())
    refuse("pre_tokenizer " + t + " is not supported");
  bool byte_level = false;
  for (const json& step : pt["pretokenizers"]) {
    const std::string st = type_of(step);
    if (byte_level) refuse("a pre_tokenizer step after ByteLevel is not supported");
    if (st == "Split") {
      if (!step.contains("behavior") || step["behavior"] != "Isolated")
        refuse("Split behavior other than Isolated is not supported");
      if (flag(step, "invert", false)) refuse("Split invert = true is not supported");
      const json& p = step.value("pattern", json());
      if (p.contains("Regex") && p["Regex"].is_string())
        patterns.push_back(p["Regex"].get<std::string>());
      else if (p.contains("String") && p["String"].is_string())
        patterns.push_back(literal_pattern(p["String"].get<std::string>()));
      else
        refuse("Split without a Regex or String pattern");
    } else if (st == "Digits") {
      patterns.push_back(flag(step, "individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
    } else if (st == "ByteLevel") {
      add_byte_level(step, patterns);
      byte_level = true;
    } else {
      refuse("pre_tokenizer step " + st + " is not supported");
    }
  }
  if (!byte_level) refuse("the pre_tokenizer has no ByteLevel step (epd supports byte-level BPE only)");
  if (patterns.empty()) refuse("the pre_tokenizer splits nothing");
  return patterns;
}

// The spelling of a token named in tokenizer_config.json: "text" or {"content": "text", ...}.
std::optional<std::string> token_spelling(const json& cfg, const char* key) {
  if (!cfg.contains(key) || cfg[key].is_null()) return std::nullopt;
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  refuse(std::string("tokenizer_config.json \"") + key + "\" is neither a string nor {\"content\": ...}");
}

protocol::Result<std::unique_ptr<Tokenizer>> build(const json& root, const json& cfg) {
  if (!root.is_object()) refuse("not a JSON object");
  if (!root.value("normalizer", json()).is_null())
    refuse("normalizer " + type_of(root["normalizer"]) + " is not supported");
  if (!root.value("truncation", json()).is_null()) refuse("truncation is not supported");
  const json& model = root.value("model", json());
  if (!model.is_object()) refuse("no \"model\"");
  if (model.contains("type") && model["type"] != "BPE")
    refuse("model type " + model["type"].dump() + " is not supported (BPE only)");
  if (flag(model, "byte_fallback", false)) refuse("BPE byte_fallback is not supported");
  if (!model.value("dropout", json()).is_null()) refuse("BPE dropout is not supported");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(k) && !model[k].is_null() && model[k] != "")
      refuse(std::string("BPE ") + k + " is not supported");
  if (const json& dec = root.value("decoder", json()); !dec.is_null() && type_of(dec) != "ByteLevel")
    refuse("decoder " + type_of(dec) + " is not supported (ByteLevel)");

  detail::BpeVocab v;
  v.patterns = pre_tokenizer_patterns(root.value("pre_tokenizer", json()));
  v.ignore_merges = flag(model, "ignore_merges", false);

  const json& vocab = model.value("vocab", json());
  if (!vocab.is_object() || vocab.empty()) refuse("model.vocab is not a non-empty object");
  const json& added = root.value("added_tokens", json::array());
  if (!added.is_array()) refuse("added_tokens is not an array");
  if (vocab.size() + added.size() > kMaxVocabSize)
    refuse("more than " + std::to_string(kMaxVocabSize) + " tokens");
  auto place = [&](uint64_t id, const std::string& text, TokenType type) {
    if (id >= kMaxVocabSize) refuse("token id " + std::to_string(id) + " is out of range");
    if (id >= v.tokens.size()) {
      v.tokens.resize(id + 1);
      v.types.resize(id + 1, TokenType::unused);
    }
    if (!v.tokens[id].empty() && v.tokens[id] != text)
      refuse("token id " + std::to_string(id) + " is both \"" + v.tokens[id] + "\" and \"" + text + "\"");
    v.tokens[id] = text;
    v.types[id] = type;
  };
  for (const auto& [text, id] : vocab.items()) {
    if (!id.is_number_unsigned()) refuse("vocab id of \"" + text + "\" is not an unsigned integer");
    place(id.get<uint64_t>(), text, TokenType::normal);
  }
  for (const json& a : added) {
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_unsigned() || !a.contains("content") ||
        !a["content"].is_string())
      refuse("an added token without an id or content");
    const std::string content = a["content"].get<std::string>();
    for (const char* k : {"lstrip", "rstrip", "single_word"})
      if (flag(a, k, false)) refuse("added token \"" + content + "\": " + k + " = true is not supported");
    place(a["id"].get<uint64_t>(), content,
          flag(a, "special", false) ? TokenType::control : TokenType::user_defined);
  }
  for (size_t id = 0; id < v.tokens.size(); ++id)
    if (v.tokens[id].empty()) refuse("token id " + std::to_string(id) + " is missing (ids must be dense)");

  const json& merges = model.value("merges", json::array());
  if (!merges.is_array()) refuse("model.merges is not an array");
  if (merges.size() > kMaxMerges)
    refuse(std::to_string(merges.size()) + " merges, at most " + std::to_string(kMaxMerges));
  v.merges.reserve(merges.size());
  for (const json& m : merges) {
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        refuse("merge \"" + s + "\" is not two tokens separated by one space");
      v.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      v.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      refuse("a merge is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }

  auto id_of = [&](const std::string& text) -> std::optional<TokenId> {
    for (size_t id = 0; id < v.tokens.size(); ++id)
      if (v.tokens[id] == text) return static_cast<TokenId>(id);
    refuse("tokenizer_config.json names token \"" + text + "\", which the vocabulary lacks");
  };
  // BOS from the post-processor's template (Llama-3 style), overridden by tokenizer_config.json.
  const json& post = root.value("post_processor", json());
  if (!post.is_null()) {
    const std::string pt = type_of(post);
    if (pt == "TemplateProcessing") {
      const json& single = post.value("single", json::array());
      if (single.is_array() && !single.empty() && single[0].contains("SpecialToken")) {
        v.bos = id_of(single[0]["SpecialToken"].value("id", std::string()));
        v.add_bos = true;
      }
    } else if (pt != "ByteLevel") {
      refuse("post_processor " + pt + " is not supported (TemplateProcessing, ByteLevel)");
    }
  }
  if (cfg.is_object()) {
    if (auto s = token_spelling(cfg, "bos_token")) v.bos = id_of(*s);
    if (auto s = token_spelling(cfg, "eos_token")) v.eos = id_of(*s);
    v.add_bos = flag(cfg, "add_bos_token", v.add_bos);
  }
  return detail::make_bpe(std::move(v));
}

}  // namespace

protocol::Result<std::unique_ptr<Tokenizer>> load_tokenizer_json(std::string_view tokenizer_json,
                                                                 std::string_view tokenizer_config_json) {
  auto fail = [](std::string what) {
    return protocol::make_error(protocol::ErrorCode::config_error, "tokenizer.json: " + std::move(what));
  };
  if (tokenizer_json.size() > kMaxTokenizerFileBytes || tokenizer_config_json.size() > kMaxTokenizerFileBytes)
    return fail("larger than " + std::to_string(kMaxTokenizerFileBytes) + " bytes");
  try {
    const json root = json::parse(tokenizer_json);
    const json cfg = tokenizer_config_json.empty() ? json() : json::parse(tokenizer_config_json);
    return build(root, cfg);
  } catch (const Refused& r) {
    return fail(r.what);
  } catch (const json::exception& e) {
    return fail(std::string("malformed JSON: ") + e.what());
  }
}

}  // namespace epd::model
