#pragma once
// Sound for the audio towers of mmproj files (Whisper encoders: Ultravox, Qwen2-Audio). A client's file
// (WAV, MP3 or FLAC) is decoded by miniaudio as llama.cpp's mtmd helper decodes it, to mono float samples at
// the towers' rate, so that the samples, and so the rows, are the ones llama-server would compute. The
// input is hostile: a file miniaudio cannot decode, a truncated one, or one longer than the caller's limit
// is an invalid_request error naming the problem, before more than the limit is decoded.
//
// Between roles a clip travels as a WAV of 32-bit float mono samples at kAudioSampleRate (SUBMIT's media
// items, beside the images' PPMs): one format the encoder reads with no conversion.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "epd/protocol/result.hpp"

namespace epd::model {

// Every Whisper-based tower libmtmd runs takes 16 kHz (clip.cpp sets it; no mmproj key changes it).
inline constexpr uint32_t kAudioSampleRate = 16000;

struct Audio {
  std::vector<float> samples;  // mono, kAudioSampleRate; at least one
};

// A client's audio file to mono float at kAudioSampleRate (miniaudio's resampler and channel mixer, as
// mtmd_helper_bitmap_init_from_buf). invalid_request: not a WAV, MP3 or FLAC miniaudio decodes, no samples,
// fewer frames than the header promises (truncated), or more than max_samples after resampling (the error
// names the limit in seconds).
protocol::Result<Audio> decode_audio(std::span<const uint8_t> file, uint64_t max_samples);

// The wire form: RIFF WAVE, format 3 (IEEE float), 32 bits, mono, kAudioSampleRate.
std::vector<uint8_t> encode_audio_wav(const Audio& audio);
// Exactly that form (the encoder's input): invalid_request for anything else, a data chunk that is not
// whole samples or is empty, or more than max_samples.
protocol::Result<Audio> parse_audio_wav(std::span<const uint8_t> bytes, uint64_t max_samples = UINT64_MAX);

// A media item's bytes as SUBMIT carries them: an audio clip in the wire form (starts "RIFF"), else an image
// (a binary PPM).
bool is_audio_item(std::span<const uint8_t> bytes);

// "N s" with up to one decimal, for errors and logs.
std::string audio_seconds(uint64_t samples);

}  // namespace epd::model
