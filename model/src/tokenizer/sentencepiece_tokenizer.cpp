// SentencePiece tokenizers through Debian's libsentencepiece: a tokenizer.model as it is, or a GGUF "llama"
// vocabulary turned into the same ModelProto (spm_proto.cpp). Control and user-defined tokens are split out
// before the processor sees the text, as llama.cpp does (each text fragment then gets its own dummy-prefix
// space), so "<s>" in a prompt is BOS only when specials are parsed.
#include <sentencepiece_processor.h>

#include <algorithm>

#include "epd/model/tokenizer_load.hpp"
#include "special_split.hpp"
#include "spm_proto.hpp"

namespace epd::model {
namespace {

constexpr std::string_view kMetaSpace = "\xE2\x96\x81";     // U+2581, SentencePiece's escaped space
constexpr std::string_view kUnkSurface = " \xE2\x81\x87 ";  // what SentencePiece prints for <unk>

protocol::Error bad(std::string detail) {
  return protocol::make_error(protocol::ErrorCode::config_error, "tokenizer.model: " + std::move(detail));
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  protocol::Status load(std::string_view proto, std::optional<bool> add_bos,
                        const std::vector<TokenId>& rstrip) {
    auto strips = [&](int id) {
      return std::find(rstrip.begin(), rstrip.end(), static_cast<TokenId>(id)) != rstrip.end();
    };
    if (proto.size() > kMaxTokenizerFileBytes)
      return bad("larger than " + std::to_string(kMaxTokenizerFileBytes));
    const auto st = spm_.LoadFromSerializedProto(proto);
    if (!st.ok()) return bad("libsentencepiece refused it: " + st.ToString());
    const int n = spm_.GetPieceSize();
    if (n <= 0 || static_cast<uint32_t>(n) > kMaxVocabSize)
      return bad(std::to_string(n) + " pieces (1.." + std::to_string(kMaxVocabSize) + ")");
    pieces_.resize(n);
    types_.resize(n);
    for (int id = 0; id < n; ++id) {
      const std::string& p = spm_.IdToPiece(id);
      if (p.size() > kMaxTokenBytes) return bad("piece " + std::to_string(id) + " is too long");
      TokenType t = TokenType::normal;
      if (spm_.IsControl(id))
        t = TokenType::control;
      else if (spm_.IsUnknown(id))
        t = TokenType::unknown;
      else if (spm_.IsByte(id))
        t = TokenType::byte;
      else if (spm_.IsUnused(id))
        t = TokenType::unused;
      types_[id] = t;
      pieces_[id] = text_of(p, t);
      if (t == TokenType::control || t == TokenType::unknown) specials_.add(p, id, true, strips(id));
    }
    for (uint32_t id : detail::spm_user_defined_ids(proto)) {
      if (id >= pieces_.size()) continue;
      types_[id] = TokenType::user_defined;
      specials_.add(spm_.IdToPiece(static_cast<int>(id)), id, false, strips(static_cast<int>(id)));
    }
    if (spm_.bos_id() >= 0) bos_ = static_cast<TokenId>(spm_.bos_id());
    if (spm_.eos_id() >= 0) eos_ = static_cast<TokenId>(spm_.eos_id());
    add_bos_ = add_bos.value_or(bos_.has_value());
    // The processor does not expose the normalizer's add_dummy_prefix; a one-letter text shows it.
    std::vector<std::string> probe;
    dummy_prefix_ = spm_.Encode("a", &probe).ok() && !probe.empty() && probe[0].starts_with(kMetaSpace);
    return {};
  }

  std::string_view kind() const override { return "sentencepiece"; }
  uint32_t vocab_size() const override { return static_cast<uint32_t>(pieces_.size()); }

  protocol::Result<std::vector<TokenId>> encode(std::string_view text, bool parse_special) const override {
    return encode_split(text, parse_special, {});
  }
  protocol::Result<std::vector<TokenId>> encode_rendered(std::string_view text,
                                                         std::span<const TextRange> literal) const override {
    return encode_split(text, true, literal);
  }
  protocol::Result<std::vector<TokenId>> encode_split(std::string_view text, bool parse_special,
                                                      std::span<const TextRange> literal) const {
    if (text.size() > kMaxEncodeBytes)
      return protocol::make_error(protocol::ErrorCode::invalid_request, "text to tokenize is too long");
    std::vector<TokenId> out;
    std::vector<int> ids;
    for (const detail::Fragment& f : specials_.split(text, parse_special, literal)) {
      if (f.token) {
        out.push_back(*f.token);
        continue;
      }
      const auto st = spm_.Encode(f.text, &ids);
      if (!st.ok())
        return protocol::make_error(protocol::ErrorCode::invalid_request, "sentencepiece: " + st.ToString());
      for (int id : ids) out.push_back(static_cast<TokenId>(id));
    }
    return out;
  }

  std::string piece(TokenId id, bool render_special) const override {
    if (id >= pieces_.size()) return {};
    const TokenType t = types_[id];
    if (t == TokenType::control) return render_special ? spm_.IdToPiece(static_cast<int>(id)) : std::string();
    if (t == TokenType::unknown)
      return render_special ? spm_.IdToPiece(static_cast<int>(id)) : std::string(kUnkSurface);
    return pieces_[id];
  }
  TokenType type(TokenId id) const override { return id < types_.size() ? types_[id] : TokenType::unused; }
  std::optional<TokenId> special_id(std::string_view text) const override { return specials_.find(text); }
  std::optional<TokenId> bos() const override { return bos_; }
  std::optional<TokenId> eos() const override { return eos_; }
  bool add_bos() const override { return add_bos_; }
  bool strips_leading_space() const override { return dummy_prefix_; }

 private:
  // The bytes a piece stands for: "<0xAB>" byte pieces are that byte, U+2581 is a space.
  static std::string text_of(const std::string& p, TokenType t) {
    if (t == TokenType::byte && p.size() == 6 && hex_digit(p[3]) >= 0 && hex_digit(p[4]) >= 0)
      return std::string(1, static_cast<char>(hex_digit(p[3]) * 16 + hex_digit(p[4])));
    if (t == TokenType::control || t == TokenType::unknown || t == TokenType::unused) return {};
    std::string out;
    for (size_t i = 0; i < p.size();) {
      if (p.compare(i, kMetaSpace.size(), kMetaSpace) == 0) {
        out.push_back(' ');
        i += kMetaSpace.size();
      } else {
        out.push_back(p[i++]);
      }
    }
    return out;
  }

  sentencepiece::SentencePieceProcessor spm_;
  std::vector<std::string> pieces_;
  std::vector<TokenType> types_;
  detail::SpecialMatcher specials_;
  std::optional<TokenId> bos_, eos_;
  bool add_bos_ = true;
  bool dummy_prefix_ = true;
};

}  // namespace

namespace detail {

protocol::Result<std::unique_ptr<Tokenizer>> make_sentencepiece(std::string_view proto,
                                                                std::optional<bool> add_bos,
                                                                const std::vector<TokenId>& rstrip) {
  auto tok = std::make_unique<SentencePieceTokenizer>();
  if (auto st = tok->load(proto, add_bos, rstrip); !st) return st.error();
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace detail

protocol::Result<std::unique_ptr<Tokenizer>> load_sentencepiece(std::string_view model_proto) {
  return detail::make_sentencepiece(model_proto, std::nullopt);
}

}  // namespace epd::model
