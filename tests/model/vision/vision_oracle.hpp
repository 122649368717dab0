#pragma once
// What the vision tests share: images written as PNG (lossless, so epd's libpng and llama.cpp's stb_image
// decode the same pixels), and llama.cpp itself (epd-mtmd-reference, libllama + libmtmd) run on a prompt.
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "epd/model/image.hpp"
#include "epd/model/tokens.hpp"

namespace epd::model::testing {

// A PNG of `image` (8-bit RGB); throws std::runtime_error if libpng fails.
std::vector<uint8_t> encode_png(const Image& image);
void write_png_file(const std::filesystem::path& path, const Image& image);

struct OracleRun {
  // The prompt as mtmd laid it out: text chunks' ids, and each image chunk as `rows` copies of `image_id`.
  std::vector<TokenId> prompt;
  std::vector<uint32_t> image_chunks;  // rows of each image chunk, in order
  // With an M-RoPE language model, each image chunk's grid of positions (mtmd's nx, ny); else empty.
  std::vector<std::pair<uint32_t, uint32_t>> image_grids;
  std::vector<TokenId> generated;  // greedy, up to (not including) an end-of-generation token
  std::vector<float> embeddings;   // with `embeddings`: every image chunk's rows, in order
  uint32_t embedding_width = 0;
  double ttft_ms = 0;
  std::vector<double> encode_ms;  // per image chunk
};

// Runs `reference` (the epd-mtmd-reference binary) on the model pair with the images (files) and the
// prompt (already in the chat template, one <__media__> marker per image); image rows are written as
// `image_id` in OracleRun::prompt. Throws std::runtime_error naming the command if it fails. `f32_kv`: the
// oracle's settings (F32 KV cache, no flash attention: epd-mtmd-reference's --kv-type f32), to compare with
// epd running f32 KV; else llama.cpp's defaults, as a user runs it. `layout_only`: the prompt's layout alone
// (nothing encoded or generated: images too large to encode in a test).
OracleRun run_mtmd_reference(const std::string& reference, const std::string& lm, const std::string& mmproj,
                             const std::vector<std::filesystem::path>& images, const std::string& prompt,
                             uint32_t n_predict, TokenId image_id, bool embeddings = false, int threads = 2,
                             bool f32_kv = false, bool layout_only = false);

}  // namespace epd::model::testing
