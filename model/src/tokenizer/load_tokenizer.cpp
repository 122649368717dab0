// Picks the tokenizer a checkpoint carries: a GGUF file's own vocabulary, or a Hugging Face directory's
// tokenizer.model (SentencePiece, preferred: it is what the model was trained with) or tokenizer.json.
#include <filesystem>
#include <fstream>

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

}  // namespace

protocol::Result<std::unique_ptr<Tokenizer>> tokenizer_from_vocab(const VocabMetadata& v) {
  if (v.model == "llama") {
    auto proto = detail::spm_proto_from_vocab(v);
    if (!proto) return proto.error();
    return detail::make_sentencepiece(*proto, v.add_bos.value_or(true));
  }
  if (v.model != "gpt2")
    return bad("tokenizer.ggml.model \"" + v.model + "\" is not supported (llama, gpt2)");
  detail::BpeVocab b;
  b.tokens = v.tokens;
  if (!v.token_types.empty()) {
    if (v.token_types.size() != v.tokens.size())
      return bad("gguf gpt2 vocabulary: token types and tokens differ in count");
    b.types.reserve(v.token_types.size());
    for (int32_t t : v.token_types) {
      if (t < 1 || t > 6) return bad("gguf gpt2 vocabulary: token type " + std::to_string(t));
      b.types.push_back(static_cast<TokenType>(t));
    }
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
