#pragma once
// Shape of the reference model. Everything that changes weights or KV layout lives here, so two processes
// that load the same config (and seed) compute bit-identical results.
#include <cstdint>
#include <string>
#include <string_view>

#include "epd/protocol/result.hpp"

namespace epd::model {

// Largest KV page, in tokens. One bound for the model's page_size, every KV pool layout (prefill and decode
// may page differently) and the roles' kv_page_size setting.
inline constexpr uint32_t kMaxPageSize = 4096;

struct ModelConfig {
  std::string name = "custom";
  uint32_t vocab = 259;  // bytes 0..255 + BOS, EOS, IMAGE (fixed: the tokenizer is byte-level)
  uint32_t d_model = 64;
  uint32_t layers = 2;
  uint32_t heads = 4;
  uint32_t kv_heads = 2;    // grouped-query attention: heads % kv_heads == 0
  uint32_t head_dim = 16;   // even (RoPE rotates pairs)
  uint32_t ffn = 192;       // SwiGLU hidden size
  uint32_t max_seq = 1024;  // longest sequence (prompt + generated); sizes the RoPE table
  uint32_t page_size = 16;  // tokens per KV page, 1..kMaxPageSize
  uint32_t patch_size = 8;  // image pixels per patch side
  uint32_t encoder_layers = 1;
  uint32_t max_image_patches = 64;  // larger images are rejected by encode()/build_prompt()
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
  uint64_t seed = 1;
  // Set: a Llama-family checkpoint (a Hugging Face directory or a .gguf file, epd/model/llama.hpp) whose
  // shape fills the fields above; vocab is then the checkpoint's and the encoder fields are unused (no
  // vision tower). Empty: the seeded reference model.
  std::string checkpoint;
  // Set (with a checkpoint): llama.cpp's mmproj GGUF of the checkpoint, its vision tower and projector
  // (epd/model/mmproj.hpp). The encoder runs it through libmtmd; prefill places its rows.
  std::string mmproj;
  // Set by with_mmproj() from the mmproj's projector (Gemma 3's): the rows of one image attend to each other
  // in both directions, and a prefill chunk never cuts them (epd/model/chunk_grid.hpp).
  bool bidirectional_images = false;
  // Set from the checkpoint (Qwen2-VL's "qwen2vl" language model): rows rotate by (t, y, x) positions
  // (M-RoPE), which lag their KV slots after an image (epd/model/positions.hpp).
  bool mrope = false;
  uint32_t threads = 1;  // compute threads of a checkpoint runner (results do not depend on it)

  // KV bytes one token occupies in an f32 cache (all layers, K and V).
  uint64_t kv_bytes_per_token(uint32_t elem_size = 4) const {
    return uint64_t{layers} * 2 * kv_heads * head_dim * elem_size;
  }
  bool operator==(const ModelConfig&) const = default;
};

// Checks ranges and divisibility; the limits keep a hostile config from allocating absurd amounts.
protocol::Status validate(const ModelConfig& cfg);

// Built-in presets: "tiny" (demo, fast) and "bench" (KV >= 2 MiB per 512-token prompt).
protocol::Result<ModelConfig> preset(std::string_view name);

// TOML with one [model] table; unknown keys are errors (a typo must not silently give another model).
// Keys not given keep the defaults above; `preset = "tiny"` starts from a preset instead.
protocol::Result<ModelConfig> parse_model_config(std::string_view toml_text,
                                                 std::string_view source = "<string>");
protocol::Result<ModelConfig> load_model_config(const std::string& path);

std::string to_toml(const ModelConfig& cfg);

}  // namespace epd::model
