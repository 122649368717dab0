#include "epd/model/prompt_codec.hpp"

#include <algorithm>
#include <iterator>

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
  auto tmpl = ChatTemplate::make(loaded.chat_template, *loaded.tokenizer);
  if (tmpl)
    c->template_ = std::move(*tmpl);
  else
    c->template_error_ = tmpl.error();
  if (auto eos = loaded.tokenizer->eos()) c->stops_.push_back(*eos);
  for (std::string_view s : kTurnEnds)
    if (auto id = loaded.tokenizer->special_id(s); id && loaded.tokenizer->type(*id) == TokenType::control)
      c->stops_.push_back(*id);
  c->tok_ = std::move(loaded.tokenizer);
  if (auto st = c->take_mmproj(); !st) return st.error();
  return std::shared_ptr<const PromptCodec>(std::move(c));
}

// The mmproj's header, checked against the language model, and the ids of every marker its layouts use,
// found as libmtmd finds them: the first token whose text is the piece.
protocol::Status PromptCodec::take_mmproj() {
  if (cfg_.mmproj.empty()) return {};
  auto info = read_mmproj_info(cfg_.mmproj);
  if (!info) return info.error();
  if (auto st = check_mmproj_pair(*info, cfg_); !st) return st;
  const std::vector<std::string> wanted = layout_pieces(*info);
  if (!wanted.empty()) {
    for (TokenId id = 0; id < tok_->vocab_size(); ++id) {
      const std::string piece = tok_->piece(id, true);
      if (std::find(wanted.begin(), wanted.end(), piece) != wanted.end()) pieces_.emplace(piece, id);
    }
    for (const auto& w : wanted)
      if (!pieces_.count(w))
        return protocol::make_error(protocol::ErrorCode::config_error,
                                    "mmproj " + cfg_.mmproj + ": the language model has no token '" +
                                        escape_text(w) + "', which the " + info->projector_name +
                                        " layout needs");
  }
  mmproj_ = std::move(*info);
  return {};
}

protocol::Result<std::vector<TokenId>> PromptCodec::image_tokens(MediaDims dims) const {
  auto layout = media_layout(*mmproj_, dims);
  if (!layout) return layout.error();
  std::vector<TokenId> out;
  const TokenId row = *image_token(cfg_);
  uint32_t rows = 0;
  for (const LayoutItem& item : *layout) {
    rows += item.rows;
    if (item.rows)
      out.insert(out.end(), item.rows, row);
    else
      out.push_back(pieces_.find(item.piece)->second);
  }
  if (rows > cfg_.max_image_patches)
    return invalid(media_name(dims) + " takes " + std::to_string(rows) + " rows, more than the " +
                   std::to_string(cfg_.max_image_patches) + " an item may take");
  return out;
}

protocol::Result<std::vector<ImageGrid>> PromptCodec::image_grids(std::span<const MediaDims> images) const {
  std::vector<ImageGrid> out;
  if (!mmproj_) return out;
  for (const MediaDims& dims : images) {
    auto layout = media_layout(*mmproj_, dims);
    if (!layout) return layout.error();
    for (const LayoutItem& item : *layout)
      if (item.cols) out.push_back(ImageGrid{item.cols, item.rows / item.cols});
  }
  return out;
}

protocol::Result<std::vector<TokenId>> PromptCodec::fits(std::vector<TokenId> ids) const {
  if (ids.empty()) return invalid("the prompt has no tokens");
  // A request's images land in one embedding slot of max_image_patches rows (encoder and prefill): more
  // would fail at the encoder after the work.
  if (mmproj_) {
    const auto rows = uint64_t(std::count(ids.begin(), ids.end(), *image_token(cfg_)));
    if (rows > cfg_.max_image_patches)
      return invalid("the request's images take " + std::to_string(rows) + " rows together, more than the " +
                     std::to_string(cfg_.max_image_patches) + " a request's images may take");
  }
  if (ids.size() >= cfg_.max_seq)  // leave room for at least one generated token
    return invalid("prompt of " + std::to_string(ids.size()) + " tokens does not fit max_seq " +
                   std::to_string(cfg_.max_seq));
  return ids;
}

protocol::Status PromptCodec::check_images(size_t n) const {
  if (n == 0) return {};
  if (reference_ && n > 1) return invalid("model " + cfg_.name + " takes at most one image per request");
  if (!reference_ && !mmproj_) return invalid("model " + cfg_.name + " takes no images (it has no mmproj)");
  return {};
}

protocol::Result<std::vector<TokenId>> PromptCodec::prompt(std::string_view text,
                                                           std::span<const MediaDims> images) const {
  if (auto st = check_images(images.size()); !st) return st.error();
  if (reference_) return build_prompt(cfg_, text, images.empty() ? std::nullopt : std::optional(images[0]));
  std::vector<TokenId> ids;
  if (tok_->add_bos() && tok_->bos()) ids.push_back(*tok_->bos());
  for (MediaDims d : images) {
    auto rows = image_tokens(d);
    if (!rows) return rows.error();
    ids.insert(ids.end(), rows->begin(), rows->end());
  }
  auto body = tok_->encode(text, false);
  if (!body) return body.error();
  ids.insert(ids.end(), body->begin(), body->end());
  return fits(std::move(ids));
}

protocol::Result<std::vector<TokenId>> PromptCodec::chat(std::span<const ChatTurn> turns,
                                                         std::span<const MediaDims> images,
                                                         std::span<const ChatTool> tools) const {
  if (auto st = check_images(images.size()); !st) return st.error();
  if (reference_) {
    std::vector<ChatTurn> rewritten;
    if (has_tool_parts(turns, tools)) {
      auto r = hermes_turns(turns, tools);
      if (!r) return r.error();
      rewritten = std::move(*r);
      turns = rewritten;
    }
    auto text = render_chat(cfg_, turns);
    if (!text) return text.error();
    return build_prompt(cfg_, *text, images.empty() ? std::nullopt : std::optional(images[0]));
  }
  auto rendered = render(turns, tools);
  if (!rendered) return rendered.error();
  std::vector<std::vector<TokenId>> image_ids;
  for (MediaDims d : images) {
    auto rows = image_tokens(d);
    if (!rows) return rows.error();
    image_ids.push_back(std::move(*rows));
  }
  auto ids = encode_chat(*tok_, *rendered, image_ids);
  if (!ids) return ids.error();
  return fits(std::move(*ids));
}

protocol::Result<RenderedChat> PromptCodec::render(std::span<const ChatTurn> turns,
                                                   std::span<const ChatTool> tools,
                                                   const ToolUse& use) const {
  if (reference_)
    return protocol::make_error(
        protocol::ErrorCode::config_error,
        "model " + cfg_.name + " has no Jinja chat template (its own byte-level one)");
  if (!template_) return template_error_;
  return template_->render(turns, tools, use, /*enable_thinking=*/true, tok_.get());
}

bool PromptCodec::ends_generation(TokenId id) const {
  return std::find(stops_.begin(), stops_.end(), id) != stops_.end();
}

std::string PromptCodec::text(std::span<const TokenId> tokens, bool past_end,
                              std::span<const TokenId> preserved) const {
  if (past_end) {
    std::vector<TokenId> kept;
    std::copy_if(tokens.begin(), tokens.end(), std::back_inserter(kept),
                 [&](TokenId t) { return !ends_generation(t); });
    return text(kept, false, preserved);
  }
  if (reference_) return decode_text(tokens);
  auto end = std::find_if(tokens.begin(), tokens.end(), [&](TokenId t) { return ends_generation(t); });
  return decode(*tok_, std::span(tokens.begin(), end), false, preserved);
}

GenerationText::GenerationText(std::shared_ptr<const PromptCodec> codec, bool past_end,
                               std::span<const TokenId> preserved)
    : codec_(std::move(codec)), past_end_(past_end) {
  if (codec_ && !codec_->reference_) decoder_.emplace(*codec_->tok_, false, preserved);
}

std::string GenerationText::push(TokenId id) {
  if (!decoder_) return decode_text(std::span(&id, 1));
  if (ended_) return {};
  if (codec_->ends_generation(id)) {
    if (past_end_) return {};
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
