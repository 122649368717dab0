// Llama (TinyLlama, SmolLM2, Llama-2/3 without RoPE scaling, ...): the tensor names llama.cpp's converter
// writes into GGUF and the ones Hugging Face's modeling_llama uses.
#include "families/family.hpp"

namespace epd::model::families {
namespace {

std::string gguf_name(Role role, uint32_t layer) {
  const auto block = [&](const char* name) {
    return "blk." + std::to_string(layer) + "." + name + ".weight";
  };
  switch (role) {
    case Role::token_embedding:
      return "token_embd.weight";
    case Role::output_norm:
      return "output_norm.weight";
    case Role::output:
      return "output.weight";
    case Role::attn_norm:
      return block("attn_norm");
    case Role::q:
      return block("attn_q");
    case Role::k:
      return block("attn_k");
    case Role::v:
      return block("attn_v");
    case Role::o:
      return block("attn_output");
    case Role::ffn_norm:
      return block("ffn_norm");
    case Role::gate:
      return block("ffn_gate");
    case Role::up:
      return block("ffn_up");
    case Role::down:
      return block("ffn_down");
  }
  return {};
}

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

const DecoderFamily kLlama{"llama", "llama", "llama", gguf_name, hf_name};

}  // namespace epd::model::families
