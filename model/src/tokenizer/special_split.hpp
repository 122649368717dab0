#pragma once
// Splits text on the spellings of added and control tokens before the model's own segmentation sees it, the
// way llama.cpp does: longer spellings claim their occurrences first, shorter ones split what is left.
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <span>

#include "epd/model/tokenizer.hpp"
#include "epd/model/tokens.hpp"

namespace epd::model::detail {

struct Fragment {
  std::string_view text;         // raw text (when !token)
  std::optional<TokenId> token;  // a matched special token
};

class SpecialMatcher {
 public:
  // control: matched only when the caller parses special tokens; otherwise (user-defined) always.
  // rstrip: the whitespace right after a match is dropped (llama.cpp's LLAMA_TOKEN_ATTR_RSTRIP).
  void add(std::string spelling, TokenId id, bool control, bool rstrip = false);
  // literal: ranges of `text` in which a control token's spelling, lying wholly inside one, is not matched.
  std::vector<Fragment> split(std::string_view text, bool parse_special,
                              std::span<const TextRange> literal = {}) const;
  std::optional<TokenId> find(std::string_view spelling) const;

 private:
  struct Entry {
    std::string spelling;
    TokenId id;
    bool control;
    bool rstrip;
  };
  std::vector<Entry> entries_;  // longest first
  std::unordered_map<std::string, TokenId> by_spelling_;
};

}  // namespace epd::model::detail
