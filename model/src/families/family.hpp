#pragma once
// A decoder-only model family as its checkpoint files describe it: the architecture names that select it and
// what its tensors are called. The decoder (decoder/) runs every family the same way; a family whose blocks
// are Llama's (RMSNorm, RoPE, grouped-query attention, SwiGLU, optionally tied embeddings) is one file like
// llama.cpp here and a line in families.cpp. Hyper-parameters come from the GGUF keys "<arch>.*" llama.cpp
// defines for every architecture, or from config.json's common names.
#include <span>
#include <string>
#include <string_view>

namespace epd::model::families {

// What one tensor does, the same in every family.
enum class Role { token_embedding, output_norm, output, attn_norm, q, k, v, o, ffn_norm, gate, up, down };

struct DecoderFamily {
  std::string_view name;           // "llama"
  std::string_view gguf_arch;      // general.architecture
  std::string_view hf_model_type;  // config.json's model_type
  // The tensor holding `role` (of block `layer` for the per-block roles), as a GGUF file and a Hugging Face
  // checkpoint name it.
  std::string (*gguf_tensor)(Role role, uint32_t layer);
  std::string (*hf_tensor)(Role role, uint32_t layer);
};

std::span<const DecoderFamily* const> decoder_families();
const DecoderFamily* family_by_gguf_arch(std::string_view arch);
const DecoderFamily* family_by_hf_model_type(std::string_view model_type);
// "llama, ..." for errors that list what is supported.
std::string family_names();

// The families (one definition each, in families/<name>.cpp).
extern const DecoderFamily kLlama;

}  // namespace epd::model::families
