// Audio through llama.cpp's libmtmd, with the library itself as the oracle, on random Ultravox ("ultravox":
// a llama LM) and Qwen2-Audio ("qwen2a": a qwen2 LM) pairs: a client's WAV decodes to the samples mtmd's
// helper decodes (resampled and mixed to mono at 16 kHz), the prompt epd lays out is token for token
// mtmd_tokenize's (each clip's 30 s chunks and Qwen2-Audio's markers), the encoder's rows are libmtmd's,
// and the greedy answer is llama.cpp's (epd-mtmd-reference), colocated and staged in prefill chunks of 8
// that cut the clips. Files and clips epd cannot serve are refused, naming why.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "epd/model/audio.hpp"
#include "epd/model/chat_template.hpp"
#include "epd/model/generate.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/media.hpp"
#include "epd/model/mmproj.hpp"
#include "epd/model/prompt_codec.hpp"
#include "epd/model/vision.hpp"
#include "vision_fixture.hpp"
#include "vision_oracle.hpp"
#include "vision_pair.hpp"

namespace {

namespace fs = std::filesystem;
using namespace epd::model;
namespace fx = epd::model::testing;

// Ultravox's or Qwen2-Audio's pair, with room for three chunks of Qwen2-Audio's 750 rows.
fx::Pair audio_pair(const std::string& projector, uint32_t stack_factor = 4) {
  fx::VisionSpec spec;
  spec.stack_factor = stack_factor;
  spec.lm_context = 4096;
  return fx::Pair(projector, spec);
}

// A clip as a client sends it: a WAV file at its own rate and channels.
struct Clip {
  uint32_t rate = 16000, channels = 1;
  double seconds = 3;
};

struct AudioCase {
  std::vector<Clip> clips;
  std::string user;
};

const AudioCase kAudioCases[] = {
    {{{16000, 1, 3}}, "<__media__>What did you hear?"},
    {{{44100, 2, 31}}, "Transcribe <__media__> please."},  // resampled, mixed down, two chunks
    {{{16000, 1, 2.5}, {16000, 1, 31}}, "Compare <__media__> and <__media__>."},
};

std::vector<uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("audio: epd lays out clips as libmtmd does, and answers as llama.cpp does",
          "[vision][audio][oracle]") {
  for (const char* projector : {"ultravox", "qwen2a"}) {
    auto pair = audio_pair(projector);
    auto codec = PromptCodec::for_model(pair.cfg);
    if (!codec) FAIL(codec.error().to_string());
    REQUIRE((*codec)->mmproj());
    const TokenId slot = *image_token(pair.cfg);
    auto runner = make_vision_runner(pair.cfg);
    REQUIRE(runner.ok());
    auto encoder = make_vision_encoder(pair.cfg);
    REQUIRE(encoder.ok());
    for (size_t i = 0; i < std::size(kAudioCases); ++i) {
      const AudioCase& c = kAudioCases[i];
      INFO(projector << " case " << i << ": " << c.user);
      std::vector<fs::path> files;
      std::vector<Media> clips;
      std::vector<MediaDims> dims;
      for (size_t k = 0; k < c.clips.size(); ++k) {
        files.push_back(pair.dir / ("clip-" + std::to_string(i) + "-" + std::to_string(k) + ".wav"));
        const auto wav =
            fx::make_test_wav(c.clips[k].rate, c.clips[k].channels, c.clips[k].seconds, 40 + i + k);
        std::ofstream(files.back(), std::ios::binary)
            .write(reinterpret_cast<const char*>(wav.data()), wav.size());
        auto audio = decode_audio(read_bytes(files.back()), 600 * kAudioSampleRate);
        REQUIRE(audio.ok());
        dims.push_back(media_dims(*audio));
        clips.push_back(std::move(*audio));
      }
      const std::vector<ChatTurn> turns = {{"system", "You hear sounds.", false}, {"user", c.user, true}};
      auto ids = (*codec)->chat(turns, dims);
      REQUIRE(ids.ok());
      auto text = render_chat_text("", turns, "", "");  // llama.cpp's ChatML default, as llama-server's
      REQUIRE(text.ok());
      const fx::OracleRun theirs =
          fx::run_mtmd_reference(EPD_MTMD_REFERENCE, pair.paths.lm, pair.paths.mmproj, files, *text, 12, slot,
                                 /*embeddings=*/true, 2,
                                 /*f32_kv=*/true);
      // Every chunk of every clip where mtmd puts it (a chunk too few or too many differs here).
      CHECK(*ids == theirs.prompt);

      std::vector<float> rows;
      for (const Media& clip : clips) {
        auto e = encode_media(**encoder, clip);
        REQUIRE(e.ok());
        rows.insert(rows.end(), e->data.begin(), e->data.end());
      }
      CHECK(theirs.embedding_width == pair.cfg.d_model);
      CHECK(rows == theirs.embeddings);  // the same samples through the same tower

      GenerateOptions opts;
      opts.max_tokens = 12;
      opts.dtype = DType::f32;  // as the oracle's KV cache
      opts.stop_tokens.assign((*codec)->stop_tokens().begin(), (*codec)->stop_tokens().end());
      for (bool staged : {false, true}) {
        INFO("staged " << staged);
        if (staged) {
          opts.decode_kv = KvLayoutChoice{4, DType::f32, KvDimOrder::head_token_dim};
          opts.chunk = 8;
        }
        auto ours = generate_tokens(**runner, *ids, opts, clips);
        REQUIRE(ours.ok());
        std::vector<TokenId> answer = ours->tokens;
        if (ours->stopped_at_eos) answer.pop_back();
        CHECK(answer == theirs.generated);
      }
    }
  }
}

TEST_CASE("audio: clips and files epd cannot take are refused, naming why", "[vision][audio]") {
  const auto wav = fx::make_test_wav(16000, 1, 2, 7);

  SECTION("a client's file") {
    auto whole = decode_audio(wav, 600 * kAudioSampleRate);
    REQUIRE(whole.ok());
    CHECK(whole->samples.size() == 32000);
    // Cut inside its data: the header promises more samples than come.
    auto cut = decode_audio(std::span(wav).first(wav.size() / 2), 600 * kAudioSampleRate);
    REQUIRE_FALSE(cut.ok());
    CHECK(cut.error().code == epd::protocol::ErrorCode::invalid_request);
    CHECK_THAT(cut.error().detail, Catch::Contains("truncated"));
    // Bytes that only start like an MP3 (a sync word) and a text file.
    std::vector<uint8_t> fake_mp3 = {0xFF, 0xFB, 0x90, 0x00};
    fake_mp3.resize(4096, 0x55);
    for (const auto& bytes : {fake_mp3, std::vector<uint8_t>{'h', 'e', 'l', 'l', 'o'}}) {
      auto r = decode_audio(bytes, 600 * kAudioSampleRate);
      REQUIRE_FALSE(r.ok());
      CHECK_THAT(r.error().detail, Catch::Contains("not a WAV, MP3 or FLAC"));
    }
    // Longer than the limit: refused from the header, naming both lengths.
    auto longer = decode_audio(wav, kAudioSampleRate);
    REQUIRE_FALSE(longer.ok());
    CHECK_THAT(longer.error().detail, Catch::Contains("is 2 s long, the limit is 1 s"));
  }

  SECTION("the wire form") {
    Audio a;
    a.samples = {0.5f, -0.25f, 1e-3f};
    const auto bytes = encode_audio_wav(a);
    CHECK(is_audio_item(bytes));
    auto back = parse_audio_wav(bytes);
    REQUIRE(back.ok());
    CHECK(back->samples == a.samples);
    auto item = parse_media_item(bytes);
    REQUIRE(item.ok());
    CHECK(media_dims(*item).samples == 3);
    // A client's 16-bit WAV is not the wire form, nor is a wire form cut short.
    CHECK_FALSE(parse_audio_wav(wav).ok());
    CHECK_FALSE(parse_audio_wav(std::span(bytes).first(bytes.size() - 2)).ok());
    CHECK_FALSE(parse_audio_wav(bytes, 2).ok());
  }

  SECTION("chunks as libmtmd cuts a clip") {
    // Whisper's 30 s of padding: whole 3000-frame chunks of 160 samples, the last partial one dropped.
    CHECK(audio_chunks(1) == 1);
    CHECK(audio_chunks(479839) == 1);
    CHECK(audio_chunks(479840) == 2);  // 29.99 s: two chunks, the second nearly all padding
    CHECK(audio_chunks(31 * 16000) == 2);
    CHECK(audio_chunks(65 * 16000) == 3);
  }

  SECTION("projectors and pairs") {
    // Ultravox's real stack factor: libmtmd counts 187 rows a chunk, its graph makes 188, and it aborts.
    auto eight = audio_pair("ultravox", 8);
    auto info = read_mmproj_info(eight.paths.mmproj);
    REQUIRE_FALSE(info.ok());
    CHECK(info.error().code == epd::protocol::ErrorCode::config_error);
    CHECK_THAT(info.error().detail,
               Catch::Contains("stack_factor 8") && Catch::Contains("187") && Catch::Contains("188"));
    // An audio model takes no image, a vision model no clip: a 400 at the router, not a failed room.
    auto qwen = audio_pair("qwen2a");
    auto codec = PromptCodec::for_model(qwen.cfg);
    if (!codec) FAIL(codec.error().to_string());
    const std::vector<ChatTurn> turns = {{"user", "<__media__>What is it?", true}};
    const MediaDims picture{64, 64, 0};
    auto image = (*codec)->chat(turns, std::span(&picture, 1));
    REQUIRE_FALSE(image.ok());
    CHECK_THAT(image.error().detail, Catch::Contains("takes audio, not images"));
    // A clip too long for the request's embedding slot (4096 rows: six chunks of 750).
    const MediaDims long_clip{0, 0, 200 * 16000};
    auto too_long = (*codec)->chat(turns, std::span(&long_clip, 1));
    REQUIRE_FALSE(too_long.ok());
    CHECK_THAT(too_long.error().detail, Catch::Contains("audio of 200 s takes 5250 rows"));
    auto encoder = make_vision_encoder(qwen.cfg);
    REQUIRE(encoder.ok());
    auto refused = (*encoder)->encode(make_test_image(32, 32, 1));
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().code == epd::protocol::ErrorCode::invalid_request);
  }
}
