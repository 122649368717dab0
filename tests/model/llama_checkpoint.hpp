#pragma once
// Writes a random Llama-family checkpoint twice, as a Hugging Face directory (config.json, sharded
// safetensors with mixed f32/bf16/f16 tensors, the index file) and as a GGUF file (f32 with a small
// SentencePiece-style vocabulary, Q and K rows permuted as llama.cpp's converter permutes them), holding
// the same values: every bf16/f16 value is exactly representable in f32.
#include <cstdint>
#include <filesystem>
#include <string>

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
};

struct CheckpointPaths {
  std::string hf_dir;  // dir/hf
  std::string gguf;    // dir/model.gguf
};

protocol::Result<CheckpointPaths> write_llama_checkpoint(const CheckpointSpec& spec,
                                                         const std::filesystem::path& dir);

}  // namespace epd::model::testing
