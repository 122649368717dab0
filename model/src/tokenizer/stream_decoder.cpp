#include "epd/model/tokenizer.hpp"

#include <algorithm>

namespace epd::model {
namespace {

// Length of the UTF-8 sequence a lead byte announces; 0 for a byte that cannot start one.
size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

}  // namespace

std::string StreamDecoder::push(TokenId id) {
  const bool special =
      render_special_ || std::find(preserved_.begin(), preserved_.end(), id) != preserved_.end();
  std::string bytes = tok_->piece(id, special);
  if (first_ && !bytes.empty()) {
    // SentencePiece's dummy prefix: the space encoding put before the text is not part of it.
    first_ = false;
    if (tok_->strips_leading_space() && bytes.front() == ' ') bytes.erase(0, 1);
  }
  pending_ += bytes;
  // Emit every complete character; hold back a trailing prefix of one that may still complete. Bytes that can
  // never form a character pass through as they are (the text was not UTF-8 to begin with).
  size_t i = 0, emit_end = 0;
  while (i < pending_.size()) {
    const size_t len = utf8_length(static_cast<unsigned char>(pending_[i]));
    if (len == 0) {
      emit_end = ++i;
      continue;
    }
    if (i + len > pending_.size()) {
      bool prefix_ok = true;
      for (size_t k = i + 1; k < pending_.size(); ++k)
        prefix_ok = prefix_ok && (static_cast<unsigned char>(pending_[k]) & 0xC0) == 0x80;
      if (prefix_ok) break;  // wait for the rest
      emit_end = ++i;
      continue;
    }
    i += len;
    emit_end = i;
  }
  std::string out = pending_.substr(0, emit_end);
  pending_.erase(0, emit_end);
  return out;
}

std::string StreamDecoder::finish() {
  if (pending_.empty()) return {};
  pending_.clear();
  return std::string(kReplacement);
}

std::string decode(const Tokenizer& tok, std::span<const TokenId> ids, bool render_special,
                   std::span<const TokenId> preserved) {
  StreamDecoder d(tok, render_special, preserved);
  std::string out;
  for (TokenId id : ids) out += d.push(id);
  out += d.finish();
  return out;
}

}  // namespace epd::model
