#pragma once
// Generated tokenizers for the tokenizer tests: a SentencePiece model trained by Debian's spm_train and a
// byte-level BPE learned by a tiny trainer here, both from one generated multilingual corpus, and the
// probe strings every comparison runs over.
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "epd/model/tokenizer_load.hpp"

namespace epd::model::test {

// A directory removed with everything in it when the fixture goes.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& what);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Deterministic text: English, accented Latin, CJK, Korean, Cyrillic, Greek, emoji, digits, contractions,
// tabs and runs of spaces, one sentence a line.
std::string tokenizer_corpus();

// Strings to tokenize: the kinds above, whitespace runs, newlines, special-token spellings among text,
// characters the corpus never had. A few hundred.
std::vector<std::string> probe_strings();

// spm_train on the corpus: BPE, byte fallback, identity normalization, no whitespace folding, control
// symbols <|im_start|> <|im_end|>, user-defined symbol <tool> (Llama's tokenizer.model settings). Returns the
// .model path.
std::filesystem::path train_sentencepiece(const std::filesystem::path& dir);

// The same vocabulary as GGUF would state it (model "llama"): pieces, scores, types, bos/eos/unk.
VocabMetadata sentencepiece_vocab(const std::filesystem::path& model_file);

struct BpeModel {
  std::vector<std::string> tokens;  // 256 byte characters, merged tokens, then the specials
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<std::string> specials;  // control tokens (special added tokens), last ids
  std::string user_token;             // one user-defined (non-special) added token, the very last id
};

// `merges` merges learned greedily from the corpus split into space-prefixed words.
BpeModel train_bpe(const std::string& corpus, size_t merges);

// Pre-tokenizer of the fixture, by its GGUF name: "gpt-2" (ByteLevel regex) or "llama-bpe" (Llama-3: Split +
// ByteLevel, ignore_merges).
std::string bpe_tokenizer_json(const BpeModel& m, const std::string& pre);
VocabMetadata bpe_vocab(const BpeModel& m, const std::string& pre);

// A GGUF file llama.cpp loads: the vocabulary's tokenizer.ggml.* keys, the llama architecture's minimal
// metadata and tiny random tensors (hidden 32, one layer, two heads).
void write_tokenizer_gguf(const std::filesystem::path& path, const VocabMetadata& vocab);

}  // namespace epd::model::test
