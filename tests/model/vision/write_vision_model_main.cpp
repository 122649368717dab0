// epd-write-vision-model: writes a random multimodal pair (vision_fixture.hpp) for tools and other tests:
//   epd-write-vision-model --projector mlp|idefics3|minicpmv|ultravox|qwen2a|<any> --dir D [--lm-width N]
//                          [--projector-width N] [--seed N] [--lm-file-type f32|f16|q8_0|...]
//                          [--lm-layers N] [--lm-heads N] [--lm-kv-heads N] [--lm-context N]
//                          [--vision-width N] [--vision-heads N] [--vision-ffn N] [--vision-layers N]
//                          [--stack-factor N] [--query-num N]
// writes D/lm.gguf and D/mmproj.gguf and prints their paths, one a line. The shape flags make pairs of the
// sizes people serve for benchmarks (e.g. a SmolLM2-135M-shaped LM: width 576, 30 layers, 9 heads, 3 KV).
// The vision flags shape the audio projectors' Whisper encoder too; --stack-factor is ultravox's, --query-num
// minicpmv's (which needs --lm-width a multiple of 128).
//   epd-write-vision-model --wav OUT --seconds S [--rate R] [--channels C] [--seed N]
// writes a test WAV (make_test_wav; default 16000 Hz mono) and prints its path.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>

#include "vision_fixture.hpp"

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: epd-write-vision-model --projector P --dir D [--lm-width N] [--projector-width N] "
               "[--seed N] [--lm-file-type T] [--lm-layers N] [--lm-heads N] [--lm-kv-heads N] "
               "[--lm-context N] [--vision-width N] [--vision-heads N] [--vision-ffn N] [--vision-layers N] "
               "[--stack-factor N] [--query-num N]\n"
               "       epd-write-vision-model --wav OUT --seconds S [--rate R] [--channels C] [--seed N]\n");
  return 2;
}

bool parse_u64(const char* s, uint64_t& out) {
  char* end = nullptr;
  out = std::strtoull(s, &end, 10);
  return end && *end == '\0' && end != s;
}

bool parse_seconds(const char* s, double& out) {
  char* end = nullptr;
  out = std::strtod(s, &end);
  return end && *end == '\0' && end != s && out >= 0 && out < 36000;
}

int write_wav(const std::string& path, double seconds, uint32_t rate, uint32_t channels, uint64_t seed) {
  const auto wav = epd::model::testing::make_test_wav(rate, channels, seconds, seed);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(wav.data()), static_cast<std::streamsize>(wav.size()));
  if (!out) {
    std::fprintf(stderr, "epd-write-vision-model: cannot write %s\n", path.c_str());
    return 1;
  }
  std::printf("%s\n", path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  epd::model::testing::VisionSpec spec;
  const std::pair<const char*, uint32_t*> shape[] = {
      {"--lm-layers", &spec.lm_layers},       {"--lm-heads", &spec.lm_heads},
      {"--lm-kv-heads", &spec.lm_kv_heads},   {"--lm-context", &spec.lm_context},
      {"--vision-width", &spec.vision_width}, {"--vision-heads", &spec.vision_heads},
      {"--vision-ffn", &spec.vision_ffn},     {"--vision-layers", &spec.vision_layers},
      {"--stack-factor", &spec.stack_factor}, {"--query-num", &spec.query_num}};
  std::string dir, wav;
  double seconds = -1;
  uint32_t rate = 16000, channels = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    const char* v = argv[++i];
    uint64_t n = 0;
    if (a == "--projector") {
      spec.projector = v;
    } else if (a == "--dir") {
      dir = v;
    } else if (a == "--lm-file-type") {
      spec.lm_file_type = v;
    } else if (a == "--lm-width" && parse_u64(v, n) && n > 0 && n < 65536) {
      spec.lm_width = static_cast<uint32_t>(n);
    } else if (a == "--projector-width" && parse_u64(v, n) && n < 65536) {
      spec.projector_width = static_cast<uint32_t>(n);
    } else if (a == "--seed" && parse_u64(v, n)) {
      spec.seed = n;
    } else if (a == "--wav") {
      wav = v;
    } else if (a == "--seconds" && parse_seconds(v, seconds)) {
    } else if (a == "--rate" && parse_u64(v, n) && n >= 1000 && n <= 384000) {
      rate = static_cast<uint32_t>(n);
    } else if (a == "--channels" && parse_u64(v, n) && n >= 1 && n <= 8) {
      channels = static_cast<uint32_t>(n);
    } else {
      uint32_t* field = nullptr;
      for (const auto& [name, f] : shape)
        if (a == name) field = f;
      if (!field || !parse_u64(v, n) || n == 0 || n >= 65536) return usage();
      *field = static_cast<uint32_t>(n);
    }
  }
  if (!wav.empty())
    return seconds < 0 || !dir.empty() ? usage() : write_wav(wav, seconds, rate, channels, spec.seed);
  if (dir.empty()) return usage();
  auto paths = epd::model::testing::write_vision_model(spec, dir);
  if (!paths) {
    std::fprintf(stderr, "epd-write-vision-model: %s\n", paths.error().to_string().c_str());
    return 1;
  }
  std::printf("%s\n%s\n", paths->lm.c_str(), paths->mmproj.c_str());
  return 0;
}
