#pragma once
// A prompt's media items, in prompt order: images and audio clips, and the form each travels in between
// roles (SUBMIT's items): an image as a binary PPM (image.hpp), a clip as the float WAV of audio.hpp.
#include <cstdint>
#include <span>
#include <variant>
#include <vector>

#include "epd/model/audio.hpp"
#include "epd/model/image.hpp"
#include "epd/model/tokens.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model {

using Media = std::variant<Image, Audio>;

MediaDims media_dims(const Media& item);
std::vector<uint8_t> encode_media_item(const Media& item);
// "audio clip" or "image": what a media item's bytes are (is_audio_item), for errors that name the item.
const char* media_item_kind(std::span<const uint8_t> bytes);
// A PPM or a clip's WAV (is_audio_item): invalid_request naming what is wrong; images past max_rgb_bytes
// and clips past max_samples are refused from the header.
protocol::Result<Media> parse_media_item(std::span<const uint8_t> bytes, uint64_t max_rgb_bytes = UINT64_MAX,
                                         uint64_t max_samples = UINT64_MAX);

}  // namespace epd::model
