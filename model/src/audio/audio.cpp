// Audio files through miniaudio (the copy in the pinned llama.cpp bundle, vendor/miniaudio, which llama.cpp's
// mtmd helper decodes with): its decoders only, every function static to this file (MA_API), so nothing of
// it meets the helper's own copy in the oracle program.
#include "epd/model/audio.hpp"

#include <cstring>

#define MINIAUDIO_IMPLEMENTATION
#define MA_NO_ENCODING
#define MA_NO_DEVICE_IO
#define MA_NO_RESOURCE_MANAGER
#define MA_NO_NODE_GRAPH
#define MA_NO_ENGINE
#define MA_NO_GENERATION
#define MA_API static
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-variable"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wtype-limits"
#include <miniaudio/miniaudio.h>
#pragma GCC diagnostic pop

namespace epd::model {
namespace {

protocol::Error invalid(std::string what) {
  return protocol::make_error(protocol::ErrorCode::invalid_request, std::move(what));
}

// Frames miniaudio may count past what its resampler yields.
constexpr ma_uint64 kResamplerSlack = 2;

// The WAV header encode_audio_wav writes: RIFF, fmt (16 bytes, IEEE float), data.
constexpr size_t kWavHeader = 44;

void put_tag(std::vector<uint8_t>& out, const char (&tag)[5]) {
  for (int i = 0; i < 4; ++i) out.push_back(uint8_t(tag[i]));
}
void put32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(uint8_t(v >> (8 * i)));
}
void put16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(uint8_t(v));
  out.push_back(uint8_t(v >> 8));
}
uint32_t get32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
uint16_t get16(const uint8_t* p) {
  return uint16_t(p[0] | p[1] << 8);
}

struct Decoder {
  ma_decoder d;
  bool open = false;
  ~Decoder() {
    if (open) ma_decoder_uninit(&d);
  }
};

// A WAV whose data chunk ends before its header says: miniaudio decodes what is there, as if the file were
// shorter. Walks the RIFF chunks to "data" (a size of 0 or 0xFFFFFFFF is a stream's: no length promised).
bool truncated_wav(std::span<const uint8_t> b) {
  if (b.size() < 12 || std::memcmp(b.data(), "RIFF", 4) || std::memcmp(b.data() + 8, "WAVE", 4)) return false;
  for (size_t at = 12; at + 8 <= b.size();) {
    const uint64_t size = get32(&b[at + 4]);
    if (std::memcmp(&b[at], "data", 4) == 0)
      return size != 0 && size != 0xFFFFFFFFu && size > b.size() - (at + 8);
    at += 8 + size + (size & 1);
  }
  return false;
}

}  // namespace

std::string audio_seconds(uint64_t samples) {
  const uint64_t tenths = (samples * 10 + kAudioSampleRate / 2) / kAudioSampleRate;
  return std::to_string(tenths / 10) + (tenths % 10 ? "." + std::to_string(tenths % 10) : "") + " s";
}

protocol::Result<Audio> decode_audio(std::span<const uint8_t> file, uint64_t max_samples) {
  if (file.empty()) return invalid("the audio file is empty");
  if (truncated_wav(file)) return invalid("the WAV file is truncated: its data ends before its header says");
  const ma_decoder_config config = ma_decoder_config_init(ma_format_f32, 1, kAudioSampleRate);
  Decoder dec;
  if (ma_decoder_init_memory(file.data(), file.size(), &config, &dec.d) != MA_SUCCESS)
    return invalid("the audio is not a WAV, MP3 or FLAC file that can be decoded");
  dec.open = true;
  ma_uint64 frames = 0;
  if (ma_decoder_get_length_in_pcm_frames(&dec.d, &frames) != MA_SUCCESS)
    return invalid("the audio file's length cannot be read");
  if (frames == 0) return invalid("the audio file has no samples");
  if (frames > max_samples)
    return invalid("the audio is " + audio_seconds(frames) + " long, the limit is " +
                   audio_seconds(max_samples));
  Audio out;
  out.samples.resize(frames);  // zeros where the resampler gives fewer frames than it counted, as mtmd's
  ma_uint64 read = 0;
  const ma_result r = ma_decoder_read_pcm_frames(&dec.d, out.samples.data(), frames, &read);
  // A resampled length is counted with a frame to spare (48 kHz: one more than a third); a shortfall of
  // more is a file that does not decode to its end.
  if ((r != MA_SUCCESS && r != MA_AT_END) || read + kResamplerSlack < frames)
    return invalid("the audio file is truncated or corrupt: " + std::to_string(read) + " of " +
                   std::to_string(frames) + " samples decode");
  return out;
}

std::vector<uint8_t> encode_audio_wav(const Audio& audio) {
  const uint64_t data_bytes = audio.samples.size() * sizeof(float);
  std::vector<uint8_t> out;
  out.reserve(kWavHeader + data_bytes);
  put_tag(out, "RIFF");
  put32(out, uint32_t(36 + data_bytes));
  put_tag(out, "WAVE");
  put_tag(out, "fmt ");
  put32(out, 16);
  put16(out, 3);  // WAVE_FORMAT_IEEE_FLOAT
  put16(out, 1);
  put32(out, kAudioSampleRate);
  put32(out, kAudioSampleRate * sizeof(float));
  put16(out, sizeof(float));
  put16(out, 32);
  put_tag(out, "data");
  put32(out, uint32_t(data_bytes));
  const size_t at = out.size();
  out.resize(at + data_bytes);
  std::memcpy(out.data() + at, audio.samples.data(), data_bytes);
  return out;
}

protocol::Result<Audio> parse_audio_wav(std::span<const uint8_t> b, uint64_t max_samples) {
  const auto wrong = [] {
    return invalid("an audio item is not a WAV of 32-bit float mono samples at " +
                   std::to_string(kAudioSampleRate) + " Hz");
  };
  if (b.size() < kWavHeader || std::memcmp(b.data(), "RIFF", 4) || std::memcmp(b.data() + 8, "WAVEfmt ", 8) ||
      get32(&b[16]) != 16 || get16(&b[20]) != 3 || get16(&b[22]) != 1 || get32(&b[24]) != kAudioSampleRate ||
      get16(&b[34]) != 32 || std::memcmp(&b[36], "data", 4))
    return wrong();
  const uint64_t bytes = get32(&b[40]);
  if (bytes != b.size() - kWavHeader || bytes % sizeof(float) != 0 || bytes == 0)
    return invalid("an audio item's data is not whole samples as its header says");
  if (bytes / sizeof(float) > max_samples)
    return invalid("an audio item is " + audio_seconds(bytes / sizeof(float)) + " long, the limit is " +
                   audio_seconds(max_samples));
  Audio out;
  out.samples.resize(bytes / sizeof(float));
  std::memcpy(out.samples.data(), &b[kWavHeader], bytes);
  return out;
}

bool is_audio_item(std::span<const uint8_t> bytes) {
  return bytes.size() >= 4 && std::memcmp(bytes.data(), "RIFF", 4) == 0;
}

}  // namespace epd::model
