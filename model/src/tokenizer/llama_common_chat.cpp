// What llama.cpp's chat layer (common/chat*.cpp, common/jinja, common/parsers) takes from the rest of
// common.cpp and log.cpp (declared in common.h and log.h), written again so that none of the rest (argument
// parsing, downloads, the logging thread, ...) is compiled in. Same results: the string helper is
// common.cpp's; the two vocabulary helpers are common.cpp's over libllama's C API (chat.cpp calls them only
// with a model, which epd never passes: it gives the template and its BOS/EOS spellings); logging is off
// (llama.cpp logs its warnings there, epd reports errors through its own results).
#include <cstdarg>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "common.h"
#include "log.h"

void string_replace_all(std::string& s, const std::string& search, const std::string& replace) {
  if (search.empty()) return;
  std::string builder;
  builder.reserve(s.length());
  size_t pos = 0;
  size_t last_pos = 0;
  while ((pos = s.find(search, last_pos)) != std::string::npos) {
    builder.append(s, last_pos, pos - last_pos);
    builder.append(replace);
    last_pos = pos + search.length();
  }
  builder.append(s, last_pos, std::string::npos);
  s = std::move(builder);
}

std::vector<llama_token> common_tokenize(const struct llama_vocab* vocab, const std::string& text,
                                         bool add_special, bool parse_special) {
  int n_tokens = text.length() + 2 * add_special;
  std::vector<llama_token> result(n_tokens);
  n_tokens = llama_tokenize(vocab, text.data(), text.length(), result.data(), result.size(), add_special,
                            parse_special);
  if (n_tokens == std::numeric_limits<int32_t>::min())
    throw std::runtime_error(
        "Tokenization failed: input text too large, tokenization result exceeds int32_t limit");
  if (n_tokens < 0) {
    result.resize(-n_tokens);
    llama_tokenize(vocab, text.data(), text.length(), result.data(), result.size(), add_special,
                   parse_special);
  } else {
    result.resize(n_tokens);
  }
  return result;
}

std::string common_token_to_piece(const struct llama_vocab* vocab, llama_token token, bool special) {
  std::string piece;
  piece.resize(piece.capacity());
  const int n_chars = llama_token_to_piece(vocab, token, &piece[0], piece.size(), 0, special);
  if (n_chars < 0) {
    piece.resize(-n_chars);
    llama_token_to_piece(vocab, token, &piece[0], piece.size(), 0, special);
  } else {
    piece.resize(n_chars);
  }
  return piece;
}

// Below every level (LOG_LEVEL_OUTPUT is 0): LOG_TMPL never calls common_log_add.
int common_log_get_verbosity_thold(void) {
  return -1;
}

struct common_log* common_log_main() {
  return nullptr;
}

void common_log_add(struct common_log*, enum ggml_log_level, const char*, ...) {}
