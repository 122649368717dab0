#include "epd/model/media.hpp"

#include "epd/model/runner.hpp"

namespace epd::model {

MediaDims media_dims(const Media& item) {
  if (const auto* a = std::get_if<Audio>(&item)) return MediaDims{0, 0, a->samples.size()};
  const Image& image = std::get<Image>(item);
  return MediaDims{image.width, image.height, 0};
}

std::vector<uint8_t> encode_media_item(const Media& item) {
  if (const auto* a = std::get_if<Audio>(&item)) return encode_audio_wav(*a);
  return encode_ppm(std::get<Image>(item));
}

const char* media_item_kind(std::span<const uint8_t> bytes) {
  return is_audio_item(bytes) ? "audio clip" : "image";
}

protocol::Result<Media> parse_media_item(std::span<const uint8_t> bytes, uint64_t max_rgb_bytes,
                                         uint64_t max_samples) {
  if (is_audio_item(bytes)) {
    auto audio = parse_audio_wav(bytes, max_samples);
    if (!audio) return audio.error();
    return Media{std::move(*audio)};
  }
  auto image = parse_ppm(bytes, max_rgb_bytes);
  if (!image) return image.error();
  return Media{std::move(*image)};
}

namespace {
protocol::Error no_audio_tower() {
  return protocol::make_error(protocol::ErrorCode::invalid_request, "the model has no audio tower");
}
}  // namespace

protocol::Result<Embeddings> ImageEncoder::encode_audio(const Audio&) {
  return no_audio_tower();
}
protocol::Result<Embeddings> ModelRunner::encode_audio(const Audio&) {
  return no_audio_tower();
}

protocol::Result<Embeddings> encode_media(ImageEncoder& encoder, const Media& item) {
  if (const auto* a = std::get_if<Audio>(&item)) return encoder.encode_audio(*a);
  return encoder.encode(std::get<Image>(item));
}

protocol::Result<Embeddings> encode_media(ModelRunner& runner, const Media& item) {
  if (const auto* a = std::get_if<Audio>(&item)) return runner.encode_audio(*a);
  return runner.encode(std::get<Image>(item));
}

}  // namespace epd::model
