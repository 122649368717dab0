#pragma once
// Text to token ids and back, whatever the model's vocabulary: the reference model's bytes, a SentencePiece
// model (tokenizer.model, through libsentencepiece) or a byte-level BPE (tokenizer.json, GGUF "gpt2").
// A tokenizer is immutable after loading, so one instance may serve many threads.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "epd/model/tokens.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model {

// How a token behaves, with llama.cpp's and SentencePiece's numbering (GGUF tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6
};

// Bytes [begin, end) of a text.
struct TextRange {
  size_t begin = 0;
  size_t end = 0;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual std::string_view kind() const = 0;  // "byte", "sentencepiece" or "bpe"
  virtual uint32_t vocab_size() const = 0;

  // Text to ids, without BOS (the caller adds it when add_bos()). parse_special: the spelling of a control
  // token (e.g. "<|im_start|>") becomes that token; otherwise it is plain text. User-defined added tokens
  // always match, as in llama.cpp and Hugging Face. Errors only for text the vocabulary cannot represent.
  virtual protocol::Result<std::vector<TokenId>> encode(std::string_view text, bool parse_special) const = 0;
  // A rendered chat prompt: special-token parsing, except that a control token whose spelling lies wholly
  // inside a `literal` range (text from the request) is plain text there. Ranges are sorted and disjoint.
  // The default (no special tokens to tell apart, or text the ranges cannot follow) encodes the ranges and
  // the text between them separately.
  virtual protocol::Result<std::vector<TokenId>> encode_rendered(std::string_view text,
                                                                 std::span<const TextRange> literal) const;

  // The bytes one token contributes to a decoded text. Control and unknown tokens give their spelling when
  // render_special, else nothing. An id outside the vocabulary gives nothing.
  virtual std::string piece(TokenId id, bool render_special) const = 0;

  virtual TokenType type(TokenId id) const = 0;
  // The id of the control or added token spelled exactly `text`, if any (chat templates look markers up).
  virtual std::optional<TokenId> special_id(std::string_view text) const = 0;

  virtual std::optional<TokenId> bos() const = 0;
  virtual std::optional<TokenId> eos() const = 0;
  // Whether a prompt starts with BOS (tokenizer metadata decides; the chat templates follow it).
  virtual bool add_bos() const = 0;
  // SentencePiece's dummy prefix: encoding puts a space before the text, decoding drops the first one.
  virtual bool strips_leading_space() const { return false; }
};

// ids -> text, all at once (the same rules as StreamDecoder). `preserved`: special tokens spelled out even
// without render_special (llama-server's preserved tokens: a tool-call format's markers).
std::string decode(const Tokenizer& tok, std::span<const TokenId> ids, bool render_special = false,
                   std::span<const TokenId> preserved = {});

// Incremental decoding for streaming: push() returns only whole UTF-8 characters, holding back the bytes of
// a character split across tokens until the rest arrives; finish() returns what is left (a truncated
// character comes out as U+FFFD). Concatenating every push() and finish() equals decode().
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool render_special = false,
                         std::span<const TokenId> preserved = {})
      : tok_(&tok), render_special_(render_special), preserved_(preserved.begin(), preserved.end()) {}
  std::string push(TokenId id);
  std::string finish();

 private:
  const Tokenizer* tok_;
  bool render_special_;
  std::vector<TokenId> preserved_;
  bool first_ = true;
  std::string pending_;  // bytes of an unfinished UTF-8 character
};

// The reference model's byte tokenizer (epd/model/tokens.hpp): ids 0-255 are bytes, BOS 256, EOS 257,
// IMAGE 258. Special-token parsing never applies: its specials have no spelling.
std::unique_ptr<Tokenizer> make_byte_tokenizer();

}  // namespace epd::model
