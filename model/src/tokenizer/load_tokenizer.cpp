// Picks the tokenizer a checkpoint carries: a GGUF file's own vocabulary, or a Hugging Face directory's
// tokenizer.model (SentencePiece, preferred: it is what the model was trained with) or tokenizer.json.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "bpe_tokenizer.hpp"
#include "epd/model/tokenizer_load.hpp"
#include "pretokenizer.hpp"
#include "spm_proto.hpp"

namespace epd::model {
namespace {

namespace fs = std::filesystem;

protocol::Error bad(std::string detail) {
  return protocol::make_error(protocol::ErrorCode::config_error, std::move(detail));
}

protocol::Result<std::string> read_file(const fs::path& p) {
  std::error_code ec;
  const auto size = fs::file_size(p, ec);
  if (ec) return bad(p.string() + ": " + ec.message());
  if (size > kMaxTokenizerFileBytes)
    return bad(p.string() + ": " + std::to_string(size) + " bytes, at most " +
               std::to_string(kMaxTokenizerFileBytes));
  std::ifstream in(p, std::ios::binary);
  std::string s(size, '\0');
  if (!in.read(s.data(), static_cast<std::streamsize>(size))) return bad(p.string() + ": read failed");
  return s;
}

// tokenizer_config.json's chat_template: a string, or a list of {name, template} (the "default" one).
std::string chat_template_of(const nlohmann::json& cfg) {
  if (!cfg.is_object() || !cfg.contains("chat_template")) return {};
  const auto& t = cfg["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array())
    for (const auto& e : t)
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
          e["template"].is_string())
        return e["template"].get<std::string>();
  return {};
}

protocol::Result<LoadedTokenizer> load_directory(const fs::path& dir) {
  std::string cfg_text;
  nlohmann::json cfg;
  if (fs::exists(dir / "tokenizer_config.json")) {
    auto text = read_file(dir / "tokenizer_config.json");
    if (!text) return text.error();
    cfg_text = std::move(*text);
    cfg = nlohmann::json::parse(cfg_text, nullptr, false);
    if (cfg.is_discarded()) return bad((dir / "tokenizer_config.json").string() + ": malformed JSON");
  }
  LoadedTokenizer out;
  out.chat_template = chat_template_of(cfg);
  if (out.chat_template.size() > kMaxChatTemplateBytes) return bad("chat_template is too long");
  if (fs::exists(dir / "tokenizer.model")) {
    auto proto = read_file(dir / "tokenizer.model");
    if (!proto) return proto.error();
    std::optional<bool> add_bos;
    if (cfg.is_object() && cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean())
      add_bos = cfg["add_bos_token"].get<bool>();
    auto tok = detail::make_sentencepiece(*proto, add_bos);
    if (!tok) return tok.error();
    out.tokenizer = std::move(*tok);
    return out;
  }
  if (fs::exists(dir / "tokenizer.json")) {
    auto json = read_file(dir / "tokenizer.json");
    if (!json) return json.error();
    auto tok = load_tokenizer_json(*json, cfg_text);
    if (!tok) return tok.error();
    out.tokenizer = std::move(*tok);
    return out;
  }
  return bad(dir.string() + ": no tokenizer.model or tokenizer.json");
}

// llama.cpp's loader (llama-vocab.cpp, load) makes a token control whatever type the file gives it when it
// spells an end of generation or, unless the file names that marker's id, a fill-in-the-middle marker: in
// Qwen2's vocabulary "</s>" is a normal token and "<|fim_prefix|>" a user-defined one. Such a token then
// matches only as a parsed special and decodes to nothing unless specials are rendered. A GGUF vocabulary is
// tokenized the way llama.cpp does, so epd applies the same list (llama.cpp v0.5.0's).
std::vector<int32_t> llama_cpp_token_types(const VocabMetadata& v) {
  // Groups of spellings: "" the ends of turn and of generation, else the fill-in-the-middle marker's kind.
  static const std::vector<std::pair<std::string_view, std::vector<std::string_view>>> kGroups = {
      {"",
       {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
        "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"}},
      {"",
       {"<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "</s>", "<|eom_id|>", "[EOS]", "<eos>", "<turn|>",
        "<|tool_response>", "[e~["}},
      {"pre",
       {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
        "<|code_prefix|>", "<|prefix|>"}},
      {"suf",
       {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
        "<|code_suffix|>", "<|suffix|>"}},
      {"mid",
       {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
        "<|code_middle|>", "<|middle|>"}},
      {"pad", {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}},
      {"rep", {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
      {"sep", {"<|file_sep|>"}},
  };
  std::unordered_set<std::string_view> spellings;
  for (const auto& [kind, names] : kGroups)
    if (kind.empty() ||
        std::find(v.fim_ids_given.begin(), v.fim_ids_given.end(), kind) == v.fim_ids_given.end())
      spellings.insert(names.begin(), names.end());
  std::vector<int32_t> types = v.token_types;
  if (types.empty()) types.assign(v.tokens.size(), static_cast<int32_t>(TokenType::normal));
  for (size_t i = 0; i < v.tokens.size() && i < types.size(); ++i)
    if (spellings.contains(v.tokens[i])) types[i] = static_cast<int32_t>(TokenType::control);
  return types;
}

// llama.cpp gives Phi-3's special tokens rstrip (the whitespace after them is dropped, as Phi-3's
// tokenizer.json says of its added tokens), recognising the model by general.name containing "phi-3" or
// "phi3" in any case; <unk>, <s> and <|endoftext|> keep theirs. No other family epd serves has such
// attributes.
std::vector<TokenId> llama_cpp_rstrip_ids(const VocabMetadata& v, const std::vector<int32_t>& types) {
  std::string name = v.name;
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (name.find("phi-3") == std::string::npos && name.find("phi3") == std::string::npos) return {};
  std::vector<TokenId> ids;
  for (size_t i = 0; i < types.size(); ++i) {
    const auto t = static_cast<TokenType>(types[i]);
    const bool special = t == TokenType::control || t == TokenType::user_defined || t == TokenType::unknown;
    const std::string& s = v.tokens[i];
    if (special && s != "<unk>" && s != "<s>" && s != "<|endoftext|>") ids.push_back(static_cast<TokenId>(i));
  }
  return ids;
}

}  // namespace

protocol::Result<std::unique_ptr<Tokenizer>> tokenizer_from_vocab(const VocabMetadata& v) {
  if (!v.token_types.empty() && v.token_types.size() != v.tokens.size())
    return bad("gguf vocabulary: token types and tokens differ in count");
  const std::vector<int32_t> types = llama_cpp_token_types(v);
  if (v.model == "llama") {
    VocabMetadata spm = v;
    spm.token_types = types;
    auto proto = detail::spm_proto_from_vocab(spm);
    if (!proto) return proto.error();
    return detail::make_sentencepiece(*proto, v.add_bos.value_or(true), llama_cpp_rstrip_ids(v, types));
  }
  if (v.model != "gpt2")
    return bad("tokenizer.ggml.model \"" + v.model + "\" is not supported (llama, gpt2)");
  detail::BpeVocab b;
  b.tokens = v.tokens;
  b.types.reserve(types.size());
  for (int32_t t : types) {
    if (t < 1 || t > 6) return bad("gguf gpt2 vocabulary: token type " + std::to_string(t));
    b.types.push_back(static_cast<TokenType>(t));
  }
  b.merges.reserve(v.merges.size());
  for (const std::string& m : v.merges) {
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos || sp + 1 >= m.size())
      return bad("gguf gpt2 vocabulary: merge \"" + m + "\" is not two tokens separated by a space");
    b.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  auto patterns = detail::patterns_for_pre(v.pre);
  if (!patterns) return patterns.error();
  b.patterns = std::move(*patterns);
  b.ignore_merges = detail::pre_ignores_merges(v.pre);
  b.bos = v.bos;
  b.eos = v.eos;
  b.add_bos = v.add_bos.value_or(b.ignore_merges);
  b.rstrip = llama_cpp_rstrip_ids(v, types);
  return detail::make_bpe(std::move(b));
}

protocol::Result<LoadedTokenizer> load_tokenizer(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return load_directory(path);
  if (!fs::is_regular_file(path, ec)) return bad(path + ": no such file or directory");
  auto vocab = read_gguf_vocab(path);
  if (!vocab) return vocab.error();
  auto tok = tokenizer_from_vocab(*vocab);
  if (!tok) return tok.error();
  return LoadedTokenizer{std::move(*tok), vocab->chat_template};
}

}  // namespace epd::model
