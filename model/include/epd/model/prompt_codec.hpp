#pragma once
// What the router and the HTTP API need from a model's vocabulary, whichever model runs: a prompt from text
// or from a chat, the tokens that end a generation, and text from tokens (streamed). The reference model's
// codec is exactly build_prompt / render_chat / decode_text and kEos (its behaviour does not change); a
// checkpoint's uses its own tokenizer and chat template (epd/model/tokenizer_load.hpp, chat_template.hpp).
// Immutable once made: one codec serves every request of a process.
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "epd/model/chat.hpp"
#include "epd/model/chat_template.hpp"
#include "epd/model/config.hpp"
#include "epd/model/mmproj.hpp"
#include "epd/model/positions.hpp"
#include "epd/model/tokenizer.hpp"
#include "epd/model/tokenizer_load.hpp"
#include "epd/model/tokens.hpp"

namespace epd::model {

class PromptCodec {
 public:
  // The codec of cfg's model: the byte codec of the reference model, or the tokenizer cfg.checkpoint
  // carries (config_error naming the problem if it has none epd can run, or one larger than cfg.vocab).
  static protocol::Result<std::shared_ptr<const PromptCodec>> for_model(const ModelConfig& cfg);
  // A checkpoint codec over a tokenizer already loaded (tests; a runner that has the file open).
  static protocol::Result<std::shared_ptr<const PromptCodec>> for_tokenizer(const ModelConfig& cfg,
                                                                            LoadedTokenizer loaded);

  // [BOS if the tokenizer adds it] + the images' tokens + the text's tokens (special tokens not parsed: a
  // client cannot type one), as llama.cpp lays out a prompt with its images in front. invalid_request: an
  // image for a model without a vision tower (the reference model takes one), an empty prompt, a prompt
  // that leaves no room for one generated token in cfg.max_seq.
  protocol::Result<std::vector<TokenId>> prompt(std::string_view text,
                                                std::span<const MediaDims> images) const;
  // The conversation in the model's chat template, ending where the assistant answers, each image where
  // its marker stands (ChatTurn); same errors, and config_error when the checkpoint's template does not
  // parse. A checkpoint's template is rendered by llama.cpp's engine (chat_template.hpp), tools included;
  // the reference model writes them in the Hermes format (chat_tools.hpp).
  protocol::Result<std::vector<TokenId>> chat(std::span<const ChatTurn> turns,
                                              std::span<const MediaDims> images,
                                              std::span<const ChatTool> tools = {}) const;
  // A checkpoint's conversation as its template renders it, with the parser of the answer (content,
  // reasoning_content, tool calls); config_error for the reference model (its answers are read by
  // chat_tools.hpp).
  protocol::Result<RenderedChat> render(std::span<const ChatTurn> turns, std::span<const ChatTool> tools = {},
                                        const ToolUse& use = {}) const;
  // An image's tokens: its layout (mmproj.hpp) with the vocabulary's marker ids and image_token() rows.
  // Only for a model with an mmproj.
  protocol::Result<std::vector<TokenId>> image_tokens(MediaDims dims) const;
  // The grids of the images' runs of rows that have one (LayoutItem::cols: Qwen2-VL's), in order: where an
  // M-RoPE model rotates them (positions.hpp). Empty for a model without an mmproj or such a projector.
  protocol::Result<std::vector<ImageGrid>> image_grids(std::span<const MediaDims> images) const;
  // The model's mmproj, if it has one.
  const std::optional<MmprojInfo>& mmproj() const { return mmproj_; }

  // Generation ends at EOS and at the chat template's end-of-turn token (<|eot_id|>, <|im_end|>, ...).
  bool ends_generation(TokenId id) const;
  // The tokens that end a generation (colocated runs pass them to generate(); decode stops at them).
  std::span<const TokenId> stop_tokens() const { return stops_; }
  // Text of generated tokens, up to (not including) the first that ends the generation; `past_end`: of
  // all of them, the end tokens without text (an answer with ignore_eos goes on after them).
  // `preserved`: special tokens whose text is kept (preserved_ids(), a tool-call format's markers).
  std::string text(std::span<const TokenId> tokens, bool past_end = false,
                   std::span<const TokenId> preserved = {}) const;
  const Tokenizer& tokenizer() const { return *tok_; }
  // A checkpoint's chat template (nullptr: the reference model, or a template that does not parse).
  const ChatTemplate* chat_template() const { return template_.get(); }

 private:
  PromptCodec() = default;
  protocol::Result<std::vector<TokenId>> fits(std::vector<TokenId> ids) const;
  protocol::Status take_mmproj();
  protocol::Status check_images(size_t n) const;

  ModelConfig cfg_;
  bool reference_ = true;
  std::shared_ptr<const Tokenizer> tok_;
  std::shared_ptr<const ChatTemplate> template_;
  protocol::Error template_error_;
  std::vector<TokenId> stops_;
  std::optional<MmprojInfo> mmproj_;
  std::map<std::string, TokenId, std::less<>> pieces_;  // the layout's marker tokens, by piece
  friend class GenerationText;
};

// A generation's text as its tokens arrive (one per streamed chunk): concatenating every push() and
// finish() equals codec.text(all tokens). A checkpoint's text never splits a UTF-8 character across two
// pushes and drops SentencePiece's dummy-prefix space once, at the start; nothing comes out from the token
// that ends the generation on. The reference model's text is decode_text of each token, as before.
class GenerationText {
 public:
  // codec nullptr: the reference model's byte text. `past_end`: an end token has no text and ends nothing
  // (as codec.text(tokens, true)).
  explicit GenerationText(std::shared_ptr<const PromptCodec> codec, bool past_end = false,
                          std::span<const TokenId> preserved = {});
  std::string push(TokenId id);
  std::string finish();

 private:
  std::shared_ptr<const PromptCodec> codec_;
  std::optional<StreamDecoder> decoder_;  // checkpoints only
  bool past_end_ = false;
  bool ended_ = false;
};

}  // namespace epd::model
