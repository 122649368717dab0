// Llama (Llama 2 and 3.x, TinyLlama, SmolLM2, Mistral 7B, the older Pixtral and Mistral-Small files):
// llama.cpp's LLM_ARCH_LLAMA. Rotation in adjacent pairs (llama.cpp's converter permutes Q and K rows for
// it); Llama 3.1-3.3's RoPE scaling comes as the rope_freqs tensor of frequency factors; optional biases on
// Q/K/V, the attention output and the feed-forward matrices. Hugging Face directories too, by the names
// modeling_llama uses.
#include "families/family.hpp"

namespace epd::model::families {
namespace {

std::string hf_name(Role role, uint32_t layer) {
  const auto block = [&](const char* name) {
    return "model.layers." + std::to_string(layer) + "." + name + ".weight";
  };
  switch (role) {
    case Role::token_embedding:
      return "model.embed_tokens.weight";
    case Role::output_norm:
      return "model.norm.weight";
    case Role::output:
      return "lm_head.weight";
    case Role::attn_norm:
      return block("input_layernorm");
    case Role::q:
      return block("self_attn.q_proj");
    case Role::k:
      return block("self_attn.k_proj");
    case Role::v:
      return block("self_attn.v_proj");
    case Role::o:
      return block("self_attn.o_proj");
    case Role::ffn_norm:
      return block("post_attention_layernorm");
    case Role::gate:
      return block("mlp.gate_proj");
    case Role::up:
      return block("mlp.up_proj");
    case Role::down:
      return block("mlp.down_proj");
  }
  return {};
}

}  // namespace

const DecoderFamily kLlama{
    .name = "llama",
    .gguf_arch = "llama",
    .hf_model_type = "llama",
    .examples = "Llama-3.2-1B/3B-Instruct, Llama-3.1-8B-Instruct, TinyLlama, SmolLM2, Mistral-7B",
    .rope_style = detail::RopeStyle::interleaved,
    .layout = {.out_bias = true, .ffn_biases = true, .rope_factors = BlockLayout::RopeFactors::freqs},
    .read_keys = no_own_keys,
    .keys = {},
    .hf_tensor = hf_name,
};

}  // namespace epd::model::families
