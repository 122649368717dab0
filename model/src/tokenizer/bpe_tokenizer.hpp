#pragma once
// Byte-level BPE (GPT-2, Llama-3, SmolLM, Qwen2 style): added/special tokens are split out first, the
// pre-tokenizer splits the rest, each piece is spelled byte-level and merged pair by pair, lowest merge
// rank first (ties: leftmost), exactly the order Hugging Face and llama.cpp use.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "epd/model/tokenizer.hpp"

namespace epd::model::detail {

struct BpeVocab {
  std::vector<std::string> tokens;  // normal tokens byte-level spelled; control/user-defined ones as raw text
  std::vector<TokenType> types;     // empty: all normal
  std::vector<std::pair<std::string, std::string>> merges;  // best first
  std::vector<std::string> patterns;                        // the pre-tokenizer
  bool ignore_merges = false;  // a piece that is itself a token is taken whole (Llama-3)
  std::optional<TokenId> bos, eos;
  bool add_bos = false;
  std::vector<TokenId> rstrip;  // special tokens that drop the whitespace after them (SpecialMatcher)
};

protocol::Result<std::unique_ptr<Tokenizer>> make_bpe(BpeVocab vocab);

}  // namespace epd::model::detail
