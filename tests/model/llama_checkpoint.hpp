#pragma once
// Writes a random Llama-family checkpoint twice, as a Hugging Face directory (config.json, sharded
// safetensors with mixed f32/bf16/f16 tensors, the index file) and as a GGUF file (with a small
// SentencePiece-style vocabulary, Q and K rows permuted as llama.cpp's converter permutes them), holding
// the same values when the GGUF is f32: every bf16/f16 value is exactly representable in f32.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "epd/protocol/result.hpp"

namespace epd::model::testing {

struct CheckpointSpec {
  uint32_t vocab = 384;  // >= 259: <unk> <s> </s>, 256 byte tokens, then word pieces
  uint32_t d_model = 64;
  uint32_t layers = 2;
  uint32_t heads = 4;
  uint32_t kv_heads = 2;
  uint32_t ffn = 192;
  uint32_t context = 512;
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
  bool tied = false;         // no lm_head / output tensor: the embeddings are the LM head
  bool mixed_dtypes = true;  // HF tensors in f32, bf16 and f16 (else all f32)
  uint32_t shards = 2;       // safetensors files (1: a single model.safetensors, no index)
  uint64_t seed = 7;
  // The GGUF vocabulary's first word pieces become the control tokens <|im_start|> and <|im_end|>, with a
  // ChatML chat template: a chat model's tokenizer.
  bool chat = false;
  // With chat: this Jinja template instead of the plain ChatML one (e.g. one of llama.cpp's
  // models/templates that uses <|im_start|> and <|im_end|>, such as Qwen3's).
  std::string chat_template{};
  // Added tokens of the GGUF vocabulary, in order, in place of the first word pieces after the byte tokens
  // (and after <|im_start|> <|im_end|> with chat: ids from 259, or 261): first the control tokens (type 3:
  // one token each when specials are parsed, e.g. "<fake_token_around_image>"), then plain pieces (type 1,
  // score 0, e.g. "\n\n"). The Hugging Face directory is unchanged (it has no tokenizer).
  std::vector<std::string> extra_special_tokens;
  // tokenizer.ggml.add_space_prefix (SentencePiece's dummy prefix, also after each special token); false
  // tokenizes text after a special token as BPE vocabularies do (Qwen's templates expect it).
  bool add_space_prefix = true;
  std::vector<std::string> extra_tokens;
  // The GGUF's tensor types, named as llama-quantize names a file type: "f32", "f16", "bf16", "q8_0",
  // "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k_m", "q4_k_m", "q5_k_m", "q6_k". Matrices are quantized by
  // llama.cpp's own quantizer, with llama-quantize's mix: norms f32, output.weight Q6_K, attn_v and some
  // ffn_down one step up in the _M mixes, and its fallback types for rows that are not whole k-quant blocks.
  // The Hugging Face directory keeps the unquantized values.
  std::string gguf_file_type = "f32";
  // Write, in f32, the values the quantized file would hold (each tensor quantized, then dequantized by
  // llama.cpp): the same model as gguf_file_type's, with exact f32 weights.
  bool gguf_dequantized = false;
  bool write_hf = true;  // false: only the GGUF (a benchmark's large checkpoint)

  // The GGUF's architecture (general.architecture) and what its blocks hold, as llama.cpp's converter
  // writes them: "llama" and "mistral3" (Q and K rows permuted for the interleaved rotation), "qwen2" (Q/K/V
  // biases), "qwen2vl" (qwen2's blocks, M-RoPE: rope.dimension_sections from rope_sections), "qwen3"
  // (QK-norm), "qwen3moe" (QK-norm, routed experts), "gemma3" (QK-norm, post norms, GeGLU, sliding window),
  // "phi3" (fused QKV and gate/up). All but the first two rotate in halves: their rows stay as Hugging Face
  // has them. Only "llama" writes a Hugging Face directory too (write_hf).
  std::string arch = "llama";
  // qwen2vl: the pairs of a head each of the (t, y, x, extra) positions turns (4 values; llama.cpp requires
  // the key for qwen2vl).
  std::vector<int32_t> rope_sections;
  uint32_t head_dim = 0;   // 0: d_model / heads; else written as attention.key_length / value_length
  uint32_t rope_dims = 0;  // rope.dimension_count (0: the head dim)
  bool qkv_bias = false;   // Q/K/V biases (qwen2 always has them)
  bool fused_qkv = false;  // one attn_qkv matrix (phi3 always)
  bool out_bias = false;   // attn_output.bias (llama)
  // RoPE scaling keys: rope.scaling.type ("" writes none), .factor, .original_context_length, .attn_factor.
  std::string rope_scaling;
  float rope_factor = 0;
  uint32_t rope_orig_context = 0;
  float rope_attn_factor = 0;
  // Frequency factors: Llama 3's rope_freqs (llama), or LongRoPE's rope_factors_long and _short (phi3).
  bool rope_freqs = false;
  uint32_t sliding_window =
      0;                     // gemma3: attention.sliding_window (every 6th layer global unless swa_pattern)
  uint32_t swa_pattern = 0;  // attention.sliding_window_pattern (0: not written)
  float rope_base_swa = 0;   // rope.freq_base_swa (0: not written)
  // qwen3moe: experts of expert_ffn each, experts_used chosen per row (ffn is then the dense key's value).
  uint32_t experts = 8, experts_used = 2, expert_ffn = 64;
  // Extra metadata and tensors (tests of what epd must refuse): "<key>" = u32 or f32, and 1-D f32 tensors.
  std::vector<std::pair<std::string, uint32_t>> extra_u32_keys;
  std::vector<std::pair<std::string, float>> extra_f32_keys;
  std::vector<std::pair<std::string, uint64_t>> extra_tensors;
};

struct CheckpointPaths {
  std::string hf_dir;  // dir/hf
  std::string gguf;    // dir/model.gguf
};

protocol::Result<CheckpointPaths> write_llama_checkpoint(const CheckpointSpec& spec,
                                                         const std::filesystem::path& dir);

}  // namespace epd::model::testing
