#include "epd/model/prompt_codec.hpp"

#include <algorithm>

namespace epd::model {
namespace {

protocol::Error invalid(std::string detail) {
  return protocol::make_error(protocol::ErrorCode::invalid_request, std::move(detail));
}

// End-of-turn spellings llama.cpp also treats as ending generation, when the vocabulary has them as control
// tokens: a chat model answers up to its template's turn end, not up to EOS.
constexpr std::string_view kTurnEnds[] = {
    "<|eot_id|>", "<|im_end|>", "<|end_of_text|>", "<|endoftext|>", "<|eom_id|>", "<end_of_turn>", "</s>"};

}  // namespace

protocol::Result<std::shared_ptr<const PromptCodec>> PromptCodec::for_model(const ModelConfig& cfg) {
  if (cfg.checkpoint.empty()) {
    auto c = std::shared_ptr<PromptCodec>(new PromptCodec());
    c->cfg_ = cfg;
    c->tok_ = make_byte_tokenizer();
    c->stops_ = {kEos};
    c->style_ = ChatStyle::chatml;  // the reference model's own byte-level rendering (chat.hpp)
    return std::shared_ptr<const PromptCodec>(std::move(c));
  }
  auto loaded = load_tokenizer(cfg.checkpoint);
  if (!loaded) return loaded.error();
  return for_tokenizer(cfg, std::move(*loaded));
}

protocol::Result<std::shared_ptr<const PromptCodec>> PromptCodec::for_tokenizer(const ModelConfig& cfg,
                                                                                LoadedTokenizer loaded) {
  auto c = std::shared_ptr<PromptCodec>(new PromptCodec());
  c->cfg_ = cfg;
  c->reference_ = false;
  if (loaded.tokenizer->vocab_size() > cfg.vocab)
    return protocol::make_error(protocol::ErrorCode::config_error,
                                "the tokenizer has " + std::to_string(loaded.tokenizer->vocab_size()) +
                                    " tokens, the model's embedding only " + std::to_string(cfg.vocab));
  auto style = pick_chat_style(loaded.chat_template, *loaded.tokenizer);
  if (style)
    c->style_ = *style;
  else
    c->style_error_ = style.error();
  if (auto eos = loaded.tokenizer->eos()) c->stops_.push_back(*eos);
  for (std::string_view s : kTurnEnds)
    if (auto id = loaded.tokenizer->special_id(s); id && loaded.tokenizer->type(*id) == TokenType::control)
      c->stops_.push_back(*id);
  c->tok_ = std::move(loaded.tokenizer);
  return std::shared_ptr<const PromptCodec>(std::move(c));
}

protocol::Result<std::vector<TokenId>> PromptCodec::fits(std::vector<TokenId> ids) const {
  if (ids.empty()) return invalid("the prompt has no tokens");
  if (ids.size() >= cfg_.max_seq)  // leave room for at least one generated token
    return invalid("prompt of " + std::to_string(ids.size()) + " tokens does not fit max_seq " +
                   std::to_string(cfg_.max_seq));
  return ids;
}

protocol::Result<std::vector<TokenId>> PromptCodec::prompt(std::string_view text,
                                                           std::optional<ImageDims> image) const {
  if (reference_) return build_prompt(cfg_, text, image);
  if (image) return invalid("model " + cfg_.name + " takes no images");
  std::vector<TokenId> ids;
  if (tok_->add_bos() && tok_->bos()) ids.push_back(*tok_->bos());
  auto body = tok_->encode(text, false);
  if (!body) return body.error();
  ids.insert(ids.end(), body->begin(), body->end());
  return fits(std::move(ids));
}

protocol::Result<std::vector<TokenId>> PromptCodec::chat(std::span<const ChatTurn> turns,
                                                         std::optional<ImageDims> image) const {
  if (reference_) {
    auto text = render_chat(cfg_, turns);
    if (!text) return text.error();
    return build_prompt(cfg_, *text, image);
  }
  if (image) return invalid("model " + cfg_.name + " takes no images");
  if (!style_) return style_error_;
  auto ids = encode_chat(*tok_, *style_, turns);
  if (!ids) return ids.error();
  return fits(std::move(*ids));
}

bool PromptCodec::ends_generation(TokenId id) const {
  return std::find(stops_.begin(), stops_.end(), id) != stops_.end();
}

std::string PromptCodec::text(std::span<const TokenId> tokens) const {
  if (reference_) return decode_text(tokens);
  auto end = std::find_if(tokens.begin(), tokens.end(), [&](TokenId t) { return ends_generation(t); });
  return decode(*tok_, std::span(tokens.begin(), end));
}

GenerationText::GenerationText(std::shared_ptr<const PromptCodec> codec) : codec_(std::move(codec)) {
  if (codec_ && !codec_->reference_) decoder_.emplace(*codec_->tok_);
}

std::string GenerationText::push(TokenId id) {
  if (!decoder_) return decode_text(std::span(&id, 1));
  if (ended_) return {};
  if (codec_->ends_generation(id)) {
    ended_ = true;
    return decoder_->finish();
  }
  return decoder_->push(id);
}

std::string GenerationText::finish() {
  if (!decoder_ || ended_) return {};
  ended_ = true;
  return decoder_->finish();
}

}  // namespace epd::model
