#pragma once
// The one decoder-only transformer epd runs, for the seeded reference model and for every checkpoint family
// alike: pre-norm blocks of RMSNorm -> grouped-query attention with RoPE over the paged KV cache -> RMSNorm
// -> SwiGLU, a final RMSNorm and the LM head (tied to the embeddings when there is none). What differs
// between models is their weights (decoder_weights.hpp), where image embeddings go, which tokens may be
// sampled, and how exactly the arithmetic must repeat (Arithmetic).
#include <memory>
#include <optional>

#include "decoder/decoder_weights.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/runner.hpp"
#include "epd/model/sampling.hpp"

namespace epd::model::detail {

// How a decoder computes (docs/model.md, "How determinism is guaranteed").
enum class Arithmetic : uint8_t {
  // epd's fixed-order kernels for every matmul and attention, in prefill and decode alike: every result is
  // the same sequence of IEEE operations for any chunking, batch, thread count or x86 ISA (the reference
  // model, which the whole cluster is checked against bit for bit).
  exact,
  // llama.cpp's ggml kernels (and OpenBLAS for f32 prompts) and blocked attention: the same bits for any
  // batch and thread count, for a given chunking (checkpoints).
  fast,
};

struct DecoderOptions {
  Arithmetic arithmetic = Arithmetic::fast;
  // Prompt positions holding this token id take the next row of the chunk's image embeddings instead of
  // the token's embedding; unset: the model takes no embeddings.
  std::optional<TokenId> image_token;
  // Each run of image_token rows in a prefill chunk attends within itself in both directions (Gemma 3's
  // images; the caller never cuts a run: ChunkGrid).
  bool bidirectional_images = false;
  TokenFilter filter = TokenFilter::none;  // which ids sampling may pick
  std::unique_ptr<ImageEncoder> encoder;   // null: encode() says the model has no vision tower
};

// cfg must validate and describe the weights; cfg.threads threads compute (exact: use 1).
std::unique_ptr<LlamaRunner> make_decoder(const ModelConfig& cfg, DecoderWeights weights,
                                          DecoderOptions opts);

}  // namespace epd::model::detail
