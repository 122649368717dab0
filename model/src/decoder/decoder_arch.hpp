#pragma once
// What a decoder computes beyond its shape (ModelConfig): the rotary embedding and its scaling, the attention
// scale and sliding windows, the feed-forward activation, the embedding scale and the logit soft-cap. Each
// family's file (families/) fills it from its GGUF keys and tensors, the way llama.cpp's hyper-parameters
// select what its graph builders compute; the defaults are Llama's (and the seeded reference model's).
#include <array>
#include <cstdint>
#include <vector>

namespace epd::model::detail {

// Which dimensions of a head rotate together: (2i, 2i+1) as llama.cpp's LLAMA_ROPE_TYPE_NORM (Llama's GGUF
// files, whose converter permutes Q and K rows for it), or (i, i + dims/2) as LLAMA_ROPE_TYPE_NEOX (Qwen,
// Gemma, Phi: their files keep Hugging Face's "rotate half" order).
enum class RopeStyle : uint8_t { interleaved, neox };

// One rotary embedding as ggml_rope_ext computes it (ggml-cpu's rope_yarn): pair i of position p turns by
//   theta_extrap = p * base^(-2i/dims) / freq_factors[i],   theta_interp = freq_scale * theta_extrap,
//   YaRN (ext_factor != 0): theta = mix of the two by a ramp over [corr_low, corr_high] pairs, and the
//   magnitude scaled by 1 + 0.1 ln(1/freq_scale);
// then cos and sin are multiplied by attn_factor. Computed once per position in double (RopeTable).
struct RopeSpec {
  RopeStyle style = RopeStyle::interleaved;
  uint32_t dims = 0;  // rotated dimensions, the first of each head (even, <= head_dim); 0: head_dim
  double base = 10000.0;
  double freq_scale = 1.0;  // 1 / the linear (or YaRN) scaling factor
  double ext_factor = 0.0;  // YaRN's extrapolation mix: 1 with YaRN, else 0
  double attn_factor = 1.0;
  double beta_fast = 32.0, beta_slow = 1.0;
  uint32_t n_ctx_orig = 0;  // YaRN: the context the model was trained with
  std::vector<float>
      freq_factors;  // dims/2 divisors of each pair's frequency (Llama 3's rope_freqs), or none
  // M-RoPE (ggml_rope_multi, Qwen2-VL): pair i turns by position component c of the row, the section that
  // i % (sum of sections) falls in (t, y, x, e: RopePosition); all 0: one position per row.
  std::array<uint32_t, 4> sections{};
  bool multi() const { return sections[0] + sections[1] + sections[2] + sections[3] != 0; }
};

enum class Activation : uint8_t {
  silu,       // SwiGLU: silu(gate) * up
  gelu_tanh,  // GeGLU with GELU's tanh approximation, through ggml's f16 table as llama.cpp computes it
};

struct DecoderArch {
  RopeSpec rope;                    // every layer, or the global ones when some slide
  RopeSpec rope_swa;                // layers with a sliding window
  uint32_t sliding_window = 0;      // positions a sliding layer sees (its own included); 0: none
  std::vector<uint8_t> swa_layers;  // per layer: 1 if it slides (empty: none does)
  float attn_scale = 0.0f;          // query scale; 0: 1/sqrt(head_dim)
  float embed_scale = 1.0f;         // token embeddings are multiplied by it (Gemma: sqrt(d_model))
  Activation activation = Activation::silu;
  float final_logit_softcap = 0.0f;  // logits = c * tanh(logits / c) when > 0
  // Mixture of experts (layers with a router): each row's feed-forward is the sum of its experts_used best
  // experts' (softmax over the router's logits, top k), weighted by their probabilities, renormalised to sum
  // to 1 when norm_expert_weights (Qwen3-MoE), as llama.cpp's build_moe_ffn.
  uint32_t experts = 0, experts_used = 0, expert_ffn = 0;
  bool norm_expert_weights = true;

  bool slides(uint32_t layer) const { return layer < swa_layers.size() && swa_layers[layer]; }
  const RopeSpec& rope_of(uint32_t layer) const { return slides(layer) ? rope_swa : rope; }
};

}  // namespace epd::model::detail
