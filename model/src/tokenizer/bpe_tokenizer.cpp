#include "bpe_tokenizer.hpp"

#include <algorithm>
#include <queue>
#include <unordered_map>

#include "byte_level.hpp"
#include "epd/model/tokenizer_load.hpp"
#include "pretokenizer.hpp"
#include "special_split.hpp"

namespace epd::model::detail {
namespace {

protocol::Error bad(std::string detail) {
  return protocol::make_error(protocol::ErrorCode::config_error, "bpe vocabulary: " + std::move(detail));
}

// Key of a merge pair; the length prefix keeps ("ab","c") and ("a","bc") apart whatever the spellings hold.
std::string pair_key(std::string_view a, std::string_view b) {
  std::string k;
  k.reserve(4 + a.size() + b.size());
  const uint32_t n = static_cast<uint32_t>(a.size());
  k.append(reinterpret_cast<const char*>(&n), sizeof n);
  k.append(a).append(b);
  return k;
}

class BpeTokenizer final : public Tokenizer {
 public:
  protocol::Status load(BpeVocab v) {
    const size_t n = v.tokens.size();
    if (n == 0 || n > kMaxVocabSize)
      return bad(std::to_string(n) + " tokens (1.." + std::to_string(kMaxVocabSize) + ")");
    if (!v.types.empty() && v.types.size() != n) return bad("token types and tokens differ in count");
    if (v.merges.size() > kMaxMerges)
      return bad(std::to_string(v.merges.size()) + " merges, at most " + std::to_string(kMaxMerges));
    auto pre = Pretokenizer::compile(v.patterns);
    if (!pre) return pre.error();
    pre_ = std::move(*pre);
    types_ = v.types.empty() ? std::vector<TokenType>(n, TokenType::normal) : std::move(v.types);
    pieces_.resize(n);
    ids_.reserve(n);
    for (size_t id = 0; id < n; ++id) {
      const std::string& t = v.tokens[id];
      if (t.empty() || t.size() > kMaxTokenBytes)
        return bad("token " + std::to_string(id) + " is empty or longer than " +
                   std::to_string(kMaxTokenBytes));
      const TokenType type = types_[id];
      const bool raw =
          type == TokenType::control || type == TokenType::user_defined || type == TokenType::unknown;
      pieces_[id] = raw ? t : from_byte_level(t);
      ids_.emplace(t, static_cast<TokenId>(id));  // the first of duplicate spellings wins, as in llama.cpp
      if (raw)
        specials_.add(t, static_cast<TokenId>(id), type != TokenType::user_defined,
                      std::find(v.rstrip.begin(), v.rstrip.end(), id) != v.rstrip.end());
    }
    ranks_.reserve(v.merges.size());
    for (size_t r = 0; r < v.merges.size(); ++r) {
      const auto& [a, b] = v.merges[r];
      if (a.empty() || b.empty() || a.size() + b.size() > kMaxTokenBytes)
        return bad("merge " + std::to_string(r) + " has an empty or overlong side");
      ranks_.emplace(pair_key(a, b), static_cast<uint32_t>(r));
    }
    for (auto id : {v.bos, v.eos})
      if (id && *id >= n) return bad("bos/eos id " + std::to_string(*id) + " is outside the vocabulary");
    bos_ = v.bos;
    eos_ = v.eos;
    add_bos_ = v.add_bos && bos_.has_value();
    ignore_merges_ = v.ignore_merges;
    return {};
  }

  std::string_view kind() const override { return "bpe"; }
  uint32_t vocab_size() const override { return static_cast<uint32_t>(pieces_.size()); }

  protocol::Result<std::vector<TokenId>> encode(std::string_view text, bool parse_special) const override {
    return encode_split(text, parse_special, {});
  }
  protocol::Result<std::vector<TokenId>> encode_rendered(std::string_view text,
                                                         std::span<const TextRange> literal) const override {
    // Invalid UTF-8 is replaced before splitting, which would move the ranges: then piece by piece.
    if (!literal.empty() && sanitize_utf8(text) != text) return Tokenizer::encode_rendered(text, literal);
    return encode_split(text, true, literal);
  }

 private:
  protocol::Result<std::vector<TokenId>> encode_split(std::string_view text, bool parse_special,
                                                      std::span<const TextRange> literal) const {
    if (text.size() > kMaxEncodeBytes)
      return protocol::make_error(protocol::ErrorCode::invalid_request, "text to tokenize is too long");
    const std::string clean = sanitize_utf8(text);
    std::vector<TokenId> out;
    for (const Fragment& f : specials_.split(clean, parse_special, literal)) {
      if (f.token) {
        out.push_back(*f.token);
        continue;
      }
      auto words = pre_.split(f.text);
      if (!words) return words.error();
      for (std::string_view w : *words)
        if (auto st = encode_word(to_byte_level(w), out); !st) return st.error();
    }
    return out;
  }

 public:
  std::string piece(TokenId id, bool render_special) const override {
    if (id >= pieces_.size()) return {};
    const TokenType t = types_[id];
    if ((t == TokenType::control || t == TokenType::unknown) && !render_special) return {};
    return pieces_[id];
  }
  TokenType type(TokenId id) const override { return id < types_.size() ? types_[id] : TokenType::unused; }
  std::optional<TokenId> special_id(std::string_view text) const override { return specials_.find(text); }
  std::optional<TokenId> bos() const override { return bos_; }
  std::optional<TokenId> eos() const override { return eos_; }
  bool add_bos() const override { return add_bos_; }

 private:
  struct Symbol {
    int prev, next;
    size_t start, len;
  };
  struct Bigram {
    uint32_t rank;
    int left, right;
    size_t len;
    bool operator<(const Bigram& o) const {  // priority_queue pops the greatest: lowest rank, then leftmost
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };

  protocol::Status encode_word(const std::string& word, std::vector<TokenId>& out) const {
    if (ignore_merges_) {
      if (auto it = ids_.find(word); it != ids_.end()) {
        out.push_back(it->second);
        return {};
      }
    }
    std::vector<Symbol> sym;
    for (size_t i = 0; i < word.size();) {
      size_t len = valid_utf8_at(word, i);
      if (len == 0) len = 1;
      sym.push_back({static_cast<int>(sym.size()) - 1, -1, i, len});
      i += len;
    }
    for (size_t i = 0; i + 1 < sym.size(); ++i) sym[i].next = static_cast<int>(i + 1);
    std::priority_queue<Bigram> queue;
    auto try_pair = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      auto it = ranks_.find(pair_key(std::string_view(word).substr(sym[l].start, sym[l].len),
                                     std::string_view(word).substr(sym[r].start, sym[r].len)));
      if (it != ranks_.end()) queue.push({it->second, l, r, sym[l].len + sym[r].len});
    };
    for (size_t i = 0; i + 1 < sym.size(); ++i) try_pair(static_cast<int>(i), static_cast<int>(i + 1));
    while (!queue.empty()) {
      const Bigram b = queue.top();
      queue.pop();
      Symbol& l = sym[b.left];
      Symbol& r = sym[b.right];
      // Stale: one side was merged away or grew since this pair was queued.
      if (l.len == 0 || r.len == 0 || l.next != b.right || l.len + r.len != b.len) continue;
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = b.left;
      try_pair(l.prev, b.left);
      try_pair(b.left, l.next);
    }
    for (const Symbol& s : sym) {
      if (s.len == 0) continue;
      const std::string_view text = std::string_view(word).substr(s.start, s.len);
      if (auto it = ids_.find(std::string(text)); it != ids_.end()) {
        out.push_back(it->second);
        continue;
      }
      // A merge result the vocabulary lacks: its characters one by one (llama.cpp does the same).
      for (size_t i = 0; i < text.size();) {
        size_t len = valid_utf8_at(text, i);
        if (len == 0) len = 1;
        auto it = ids_.find(std::string(text.substr(i, len)));
        if (it == ids_.end())
          return protocol::make_error(
              protocol::ErrorCode::invalid_request,
              "the vocabulary has no token for byte 0x" + hex(from_byte_level(text.substr(i, len))));
        out.push_back(it->second);
        i += len;
      }
    }
    return {};
  }

  static std::string hex(std::string_view bytes) {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string s;
    for (unsigned char c : bytes) s.append({kHex[c >> 4], kHex[c & 15]});
    return s;
  }

  Pretokenizer pre_;
  std::vector<std::string> pieces_;
  std::vector<TokenType> types_;
  std::unordered_map<std::string, TokenId> ids_;
  std::unordered_map<std::string, uint32_t> ranks_;
  SpecialMatcher specials_;
  std::optional<TokenId> bos_, eos_;
  bool add_bos_ = false;
  bool ignore_merges_ = false;
};

}  // namespace

protocol::Result<std::unique_ptr<Tokenizer>> make_bpe(BpeVocab vocab) {
  auto tok = std::make_unique<BpeTokenizer>();
  if (auto st = tok->load(std::move(vocab)); !st) return st.error();
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace epd::model::detail
