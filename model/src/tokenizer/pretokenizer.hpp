#pragma once
// The pre-tokenizer of byte-level BPE: a sequence of regular expressions (PCRE2, UTF + Unicode properties,
// JIT-compiled), each splitting every piece so far into its matches and the text between them (Hugging
// Face's "Isolated" behaviour, llama.cpp's regex_exprs). Compiled once; matching is thread-safe.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "epd/protocol/result.hpp"

namespace epd::model::detail {

class Pretokenizer {
 public:
  static protocol::Result<Pretokenizer> compile(const std::vector<std::string>& patterns);
  // Pieces of valid UTF-8 text, in order, together covering it exactly.
  protocol::Result<std::vector<std::string_view>> split(std::string_view text) const;

 private:
  struct Code;
  std::vector<std::shared_ptr<Code>> codes_;
};

// llama.cpp's patterns for a GGUF tokenizer.ggml.pre name; error for a name epd does not know.
protocol::Result<std::vector<std::string>> patterns_for_pre(std::string_view pre);
// Whether llama.cpp takes a whole pre-token that is itself a token without merging (Llama-3's ignore_merges).
bool pre_ignores_merges(std::string_view pre);

}  // namespace epd::model::detail
