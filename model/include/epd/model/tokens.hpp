#pragma once
// Byte-level tokenizer and prompt construction. The router and the colocated runner both build prompts
// through build_prompt(), so the placeholder count and order are identical everywhere.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "epd/model/config.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model {

using TokenId = uint32_t;

inline constexpr TokenId kBos = 256;
inline constexpr TokenId kEos = 257;
inline constexpr TokenId kImage = 258;  // placeholder: its input row is an image embedding
inline constexpr uint32_t kVocab = 259;

std::vector<TokenId> encode_text(std::string_view text);
// Bytes back to a string; specials are dropped (BOS/IMAGE) or end the text (EOS).
std::string decode_text(std::span<const TokenId> tokens);

// One item of a prompt's media: an image's size in pixels, or an audio clip's length in samples (mono at
// kAudioSampleRate, epd/model/audio.hpp; width and height 0). A clip has at least one sample.
struct MediaDims {
  uint32_t width = 0;
  uint32_t height = 0;
  uint64_t samples = 0;
  bool audio() const { return samples != 0; }
};

// Patches the encoder emits for an image: ceil(w/p) * ceil(h/p) (edges are zero-padded).
uint64_t image_token_count(const ModelConfig& cfg, MediaDims dims);

// [BOS] [IMAGE x image_token_count] [text bytes...]. Errors if the image has too many patches or the prompt
// does not fit max_seq.
protocol::Result<std::vector<TokenId>> build_prompt(const ModelConfig& cfg, std::string_view text,
                                                    std::optional<MediaDims> image);

// Text safe for a terminal: printable ASCII as is, every other byte as \xNN.
std::string escape_text(std::string_view text);

uint32_t count_image_tokens(std::span<const TokenId> tokens);

// A prompt given as token ids: non-empty, every id below cfg.vocab, leaving room for one generated token in
// max_seq (invalid_request naming the problem otherwise).
protocol::Result<std::vector<TokenId>> check_prompt_tokens(const ModelConfig& cfg,
                                                           std::span<const uint32_t> ids);

}  // namespace epd::model
