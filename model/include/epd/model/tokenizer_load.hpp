#pragma once
// Loading a checkpoint's tokenizer: a Hugging Face directory (tokenizer.model through libsentencepiece, or
// tokenizer.json as byte-level BPE, plus tokenizer_config.json) or the tokenizer.ggml.* metadata of a GGUF
// file. Every input is hostile until checked: sizes are bounded and an unsupported feature is an error
// naming it, never a silently different tokenization.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "epd/model/tokenizer.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model {

inline constexpr uint32_t kMaxVocabSize = 1u << 20;  // tokens (largest real vocabularies: ~256k)
inline constexpr uint32_t kMaxMerges = 1u << 21;
inline constexpr uint32_t kMaxTokenBytes = 4096;                // one token's spelling
inline constexpr uint64_t kMaxTokenizerFileBytes = 256u << 20;  // tokenizer.json / tokenizer.model
inline constexpr uint64_t kMaxChatTemplateBytes = 1u << 20;
inline constexpr uint64_t kMaxEncodeBytes = 16u << 20;  // one text to encode

// A vocabulary as GGUF states it (tokenizer.ggml.*). model "llama": SentencePiece pieces with scores;
// model "gpt2": byte-level BPE tokens with merges by rank and the pre-tokenizer named by `pre`.
struct VocabMetadata {
  std::string name;  // general.name: llama.cpp keys some tokens' attributes on it (Phi-3's rstrip)
  std::string model;
  std::string pre;  // gpt2 only: "default", "gpt-2", "llama-bpe", "smollm", "qwen2", ... (see docs)
  std::vector<std::string> tokens;
  std::vector<float> scores;         // llama: one per token (empty: all 0)
  std::vector<int32_t> token_types;  // TokenType values (empty: all normal)
  std::vector<std::string> merges;   // gpt2: "left right", best first
  std::optional<uint32_t> bos, eos, unk;
  std::optional<bool> add_bos, add_space_prefix;
  std::string chat_template;  // tokenizer.chat_template ("" if absent)
  // The fill-in-the-middle markers whose ids the file names (tokenizer.ggml.fim_KIND_token_id, KIND one of
  // pre suf mid pad rep sep): llama.cpp then does not find that marker by its spelling
  // (tokenizer_from_vocab).
  std::vector<std::string> fim_ids_given;
};

class GgufFile;
// The vocabulary of an open GGUF file (a runner loading the checkpoint passes the file it has open).
protocol::Result<VocabMetadata> vocab_from_gguf(const GgufFile& file);
// Opens a GGUF file (v2 or v3) and reads its vocabulary.
protocol::Result<VocabMetadata> read_gguf_vocab(const std::string& path);
protocol::Result<std::unique_ptr<Tokenizer>> tokenizer_from_vocab(const VocabMetadata& vocab);

// A serialized SentencePiece ModelProto (the bytes of tokenizer.model).
protocol::Result<std::unique_ptr<Tokenizer>> load_sentencepiece(std::string_view model_proto);
// A Hugging Face tokenizer.json (model type BPE, byte-level) and its tokenizer_config.json ("" if absent:
// then bos/eos come from nowhere and add_bos from the post-processor).
protocol::Result<std::unique_ptr<Tokenizer>> load_tokenizer_json(std::string_view tokenizer_json,
                                                                 std::string_view tokenizer_config_json);

struct LoadedTokenizer {
  std::unique_ptr<Tokenizer> tokenizer;
  std::string chat_template;  // the checkpoint's Jinja template text, "" if it has none
};

// PATH is a .gguf file or a Hugging Face directory (tokenizer.model preferred over tokenizer.json).
protocol::Result<LoadedTokenizer> load_tokenizer(const std::string& path);

}  // namespace epd::model
