#pragma once
// Checkpoints of the decoder families epd runs (checkpoint_families(): Llama 2/3.x, Mistral, Qwen 2/2.5/3,
// Gemma 3, Phi-3/3.5/4-mini): pre-norm transformers with RoPE, grouped-query attention and a gated
// feed-forward, each family's variations (biases, QK-norm, post norms, sliding windows, RoPE scaling, fused
// matrices) selected by its GGUF keys and tensors. Loaded from a GGUF file (F32, F16, BF16 and ggml's
// quantized types, used in place on ggml's CPU kernels; docs/model.md, "Quantized GGUF"), or for Llama from
// a Hugging Face directory (config.json + model.safetensors or shards with model.safetensors.index.json;
// F32/F16/BF16, converted to f32 once at load).
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "epd/model/runner.hpp"

namespace epd::model {

// A family of checkpoints as epd runs it: its name, the GGUF architecture that selects it, models people
// run of it, the GGUF tensor names it may take ("blk.%d." for a block's) and the "<arch>.*" keys it may
// read (short names): any other tensor or key in a file of the family is refused by name.
struct CheckpointFamily {
  std::string name, gguf_arch, examples;
  bool hugging_face = false;  // Hugging Face directories of it load too
  std::vector<std::string> gguf_tensors, gguf_keys;
};
std::vector<CheckpointFamily> checkpoint_families();

// A directory, or a file ending in .gguf or .safetensors (which then needs a config.json beside it).
bool is_checkpoint_path(const std::string& path);

// The shape of the checkpoint at `path` (nothing but metadata is read): name, vocab, d_model, layers,
// heads, kv_heads, head_dim, ffn, max_seq (the context length, at most 65536), rope_theta, norm_eps, and
// `checkpoint = path`. config_error naming the problem for an unsupported architecture or feature.
protocol::Result<ModelConfig> read_checkpoint_config(const std::string& path);

// A model named by a path, as `[model] path` and `epd-run --model` take it: a checkpoint (above), else a
// model TOML file (load_model_config).
protocol::Result<ModelConfig> load_model_path(const std::string& path);

class LlamaRunner : public ModelRunner {
 public:
  // Logits of the rows of the last call: the last position of a prefill chunk (every position when
  // keep_all_logits(true)), of each piece that ran in a prefill_batch (in order; keep_all_logits only
  // for a lone piece), or each sequence of a decode step; vocab floats per row.
  virtual std::span<const float> last_logits() const = 0;
  virtual void keep_all_logits(bool on) = 0;
  // Which kernels multiply its matrices, for logs and benchmarks: "ggml-cpu zen4; 180 of 211 matrices
  // repacked (q4_K_8x8_q8_K) in /home/u/.cache/epd/packed-....bin".
  virtual std::string kernels() const = 0;
  // Mixture-of-experts models: for each row of the last call, how clearly its experts were chosen: the
  // smallest, over the layers, gap between the router logits of the last expert taken and the best one left
  // out, relative to the row's largest |router logit| (a row whose gap is tiny may route differently under
  // a last-bit change upstream). Empty for other models.
  virtual std::span<const float> routing_margins() const = 0;
};

// Loads the checkpoint cfg.checkpoint names (its own shape must equal cfg's, as read_checkpoint_config
// gives it; page_size and threads are cfg's). Errors: config_error naming a missing tensor, a tensor of the
// wrong shape, an unsupported dtype or architecture, a truncated file; io_error for unreadable files.
protocol::Result<std::unique_ptr<LlamaRunner>> make_llama_runner(const ModelConfig& cfg);
// The same with `encoder` as its encode() (cfg.mmproj's tower, epd/model/vision.hpp).
protocol::Result<std::unique_ptr<LlamaRunner>> make_llama_runner(const ModelConfig& cfg,
                                                                 std::unique_ptr<ImageEncoder> encoder);

// The OpenBLAS kernels prefill's sgemm runs (e.g. "SkylakeX"), as a runner selects them (docs/model.md).
std::string prefill_blas_core();

// The runner a config asks for: the checkpoint's, or the seeded reference model.
protocol::Result<std::unique_ptr<ModelRunner>> make_runner(const ModelConfig& cfg);

}  // namespace epd::model
