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
  // Added tokens of the GGUF vocabulary, in order, in place of the first word pieces after the byte tokens
  // (and after <|im_start|> <|im_end|> with chat: ids from 259, or 261): first the control tokens (type 3:
  // one token each when specials are parsed, e.g. "<fake_token_around_image>"), then plain pieces (type 1,
  // score 0, e.g. "\n\n"). The Hugging Face directory is unchanged (it has no tokenizer).
  std::vector<std::string> extra_special_tokens;
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
};

struct CheckpointPaths {
  std::string hf_dir;  // dir/hf
  std::string gguf;    // dir/model.gguf
};

protocol::Result<CheckpointPaths> write_llama_checkpoint(const CheckpointSpec& spec,
                                                         const std::filesystem::path& dir);

}  // namespace epd::model::testing
