#include "epd/model/tokens.hpp"

namespace epd::model {

std::vector<TokenId> encode_text(std::string_view text) {
  std::vector<TokenId> out;
  out.reserve(text.size());
  for (unsigned char ch : text) out.push_back(ch);
  return out;
}

std::string decode_text(std::span<const TokenId> tokens) {
  std::string out;
  for (TokenId t : tokens) {
    if (t == kEos) break;
    if (t < 256) out.push_back(static_cast<char>(t));
  }
  return out;
}

uint64_t image_token_count(const ModelConfig& cfg, MediaDims d) {
  const uint64_t p = cfg.patch_size;
  return ((d.width + p - 1) / p) * ((d.height + p - 1) / p);
}

protocol::Result<std::vector<TokenId>> build_prompt(const ModelConfig& cfg, std::string_view text,
                                                    std::optional<MediaDims> image) {
  uint64_t n_img = 0;
  if (image) {
    if (image->width == 0 || image->height == 0)
      return protocol::make_error(protocol::ErrorCode::invalid_request, "image has zero size");
    n_img = image_token_count(cfg, *image);
    if (n_img > cfg.max_image_patches)
      return protocol::make_error(protocol::ErrorCode::invalid_request,
                                  "image needs " + std::to_string(n_img) + " patches, model allows " +
                                      std::to_string(cfg.max_image_patches));
  }
  const uint64_t total = 1 + n_img + text.size();
  if (total >= cfg.max_seq)  // leave room for at least one generated token
    return protocol::make_error(
        protocol::ErrorCode::invalid_request,
        "prompt of " + std::to_string(total) + " tokens does not fit max_seq " + std::to_string(cfg.max_seq));
  std::vector<TokenId> out;
  out.reserve(total);
  out.push_back(kBos);
  out.insert(out.end(), n_img, kImage);
  for (unsigned char ch : text) out.push_back(ch);
  return out;
}

std::string escape_text(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

uint32_t count_image_tokens(std::span<const TokenId> tokens) {
  uint32_t n = 0;
  for (TokenId t : tokens) n += (t == kImage);
  return n;
}

protocol::Result<std::vector<TokenId>> check_prompt_tokens(const ModelConfig& cfg,
                                                           std::span<const uint32_t> ids) {
  auto bad = [](std::string d) {
    return protocol::make_error(protocol::ErrorCode::invalid_request, std::move(d));
  };
  if (ids.empty()) return bad("the prompt has no tokens");
  if (ids.size() >= cfg.max_seq)
    return bad("prompt of " + std::to_string(ids.size()) + " tokens leaves no room in max_seq " +
               std::to_string(cfg.max_seq));
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] >= cfg.vocab)
      return bad("prompt token " + std::to_string(i) + " is " + std::to_string(ids[i]) +
                 ", outside the vocabulary of " + std::to_string(cfg.vocab));
  return std::vector<TokenId>(ids.begin(), ids.end());
}

}  // namespace epd::model
