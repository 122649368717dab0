// The reference model's byte vocabulary behind the Tokenizer interface: the same ids encode_text and
// decode_text give, so the reference model behaves exactly as before.
#include "epd/model/tokenizer.hpp"

namespace epd::model {
namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  std::string_view kind() const override { return "byte"; }
  uint32_t vocab_size() const override { return kVocab; }
  protocol::Result<std::vector<TokenId>> encode(std::string_view text, bool) const override {
    return encode_text(text);
  }
  std::string piece(TokenId id, bool render_special) const override {
    if (id < 256) return std::string(1, static_cast<char>(id));
    if (!render_special) return {};
    if (id == kBos) return "<bos>";
    if (id == kEos) return "<eos>";
    if (id == kImage) return "<image>";
    return {};
  }
  TokenType type(TokenId id) const override { return id < 256 ? TokenType::byte : TokenType::control; }
  std::optional<TokenId> special_id(std::string_view) const override { return std::nullopt; }
  std::optional<TokenId> bos() const override { return kBos; }
  std::optional<TokenId> eos() const override { return kEos; }
  bool add_bos() const override { return true; }
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() {
  return std::make_unique<ByteTokenizer>();
}

}  // namespace epd::model
