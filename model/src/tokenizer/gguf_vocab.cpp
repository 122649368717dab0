// The tokenizer.ggml.* keys of a GGUF file, read through epd's GGUF reader (epd/model/gguf.hpp), with the
// tokenizer's own bounds on sizes and types.
#include "epd/model/gguf.hpp"
#include "epd/model/tokenizer_load.hpp"

namespace epd::model {
namespace {

protocol::Error bad(const GgufFile& f, std::string detail) {
  return protocol::make_error(protocol::ErrorCode::config_error,
                              "gguf " + f.name() + ": " + std::move(detail));
}

const GgufValue* array_of(const GgufFile& f, const char* key, GgufType elem, size_t max, std::string& err) {
  const GgufValue* v = f.find(key);
  if (!v) return nullptr;
  if (v->type != GgufType::array || v->elem != elem) {
    err = std::string(key) + " is not an array of " + std::string(gguf_type_name(elem));
    return nullptr;
  }
  const size_t n = elem == GgufType::string ? v->strings.size()
                   : elem == GgufType::f32  ? v->floats.size()
                                            : v->ints.size();
  if (n > max)
    err = std::string(key) + " has " + std::to_string(n) + " entries, at most " + std::to_string(max);
  return v;
}

}  // namespace

protocol::Result<VocabMetadata> vocab_from_gguf(const GgufFile& f) {
  VocabMetadata v;
  auto str = [&](const char* key, std::string& out, size_t max) -> protocol::Status {
    auto s = f.get_string(key);
    if (!s) return s.error();
    if (*s) {
      if ((*s)->size() > max)
        return bad(f, std::string(key) + " is longer than " + std::to_string(max) + " bytes");
      out = std::move(**s);
    }
    return {};
  };
  for (auto [key, out, max] :
       {std::tuple{"general.name", &v.name, size_t{4096}},
        std::tuple{"tokenizer.ggml.model", &v.model, size_t{256}},
        std::tuple{"tokenizer.ggml.pre", &v.pre, size_t{256}},
        std::tuple{"tokenizer.chat_template", &v.chat_template, size_t{kMaxChatTemplateBytes}}})
    if (auto st = str(key, *out, max); !st) return st.error();
  if (v.model.empty()) return bad(f, "no tokenizer.ggml.model (the file carries no vocabulary)");

  std::string err;
  if (auto* a = array_of(f, "tokenizer.ggml.tokens", GgufType::string, kMaxVocabSize, err))
    v.tokens = a->strings;
  if (auto* a = array_of(f, "tokenizer.ggml.merges", GgufType::string, kMaxMerges, err))
    v.merges = a->strings;
  if (auto* a = array_of(f, "tokenizer.ggml.scores", GgufType::f32, kMaxVocabSize, err))
    v.scores.assign(a->floats.begin(), a->floats.end());
  if (auto* a = array_of(f, "tokenizer.ggml.token_type", GgufType::i32, kMaxVocabSize, err))
    v.token_types.assign(a->ints.begin(), a->ints.end());
  if (!err.empty()) return bad(f, err);
  if (v.tokens.empty()) return bad(f, "no tokenizer.ggml.tokens");
  for (const std::string& t : v.tokens)
    if (t.size() > kMaxTokenBytes)
      return bad(f, "a token longer than " + std::to_string(kMaxTokenBytes) + " bytes");

  for (auto [key, out] :
       {std::pair{"tokenizer.ggml.bos_token_id", &v.bos}, std::pair{"tokenizer.ggml.eos_token_id", &v.eos},
        std::pair{"tokenizer.ggml.unknown_token_id", &v.unk}}) {
    auto id = f.get_uint(key);
    if (!id) return id.error();
    if (*id) {
      if (**id >= v.tokens.size()) return bad(f, std::string(key) + " is outside the vocabulary");
      *out = static_cast<uint32_t>(**id);
    }
  }
  for (const char* kind : {"pre", "suf", "mid", "pad", "rep", "sep"})
    if (f.find("tokenizer.ggml.fim_" + std::string(kind) + "_token_id")) v.fim_ids_given.emplace_back(kind);
  for (auto [key, out] : {std::pair{"tokenizer.ggml.add_bos_token", &v.add_bos},
                          std::pair{"tokenizer.ggml.add_space_prefix", &v.add_space_prefix}}) {
    if (const GgufValue* b = f.find(key)) {
      if (b->type != GgufType::boolean) return bad(f, std::string(key) + " is not a bool");
      *out = b->i != 0;
    }
  }
  return v;
}

protocol::Result<VocabMetadata> read_gguf_vocab(const std::string& path) {
  auto f = GgufFile::open(path);
  if (!f) return f.error();
  return vocab_from_gguf(*f);
}

}  // namespace epd::model
