#pragma once
// A decoder-only model family as its checkpoint files describe it, the way llama.cpp has one graph builder
// per architecture (src/models/<arch>.cpp of its source): which tensors its blocks hold beyond Llama's, how
// it rotates, and the GGUF keys of its own that select what the decoder computes (decoder_arch.hpp). The
// decoder runs every family with the same building blocks; a family is one file here and a line in
// families.cpp.
//
// Nothing is served silently wrong: the loader takes every tensor of a file by name and refuses the file if
// one is left over, and refuses any "<arch>.*" key that neither it nor the family read (KeyReader), each
// error naming the tensor or key and what epd lacks.
#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "decoder/decoder_arch.hpp"
#include "epd/model/config.hpp"
#include "epd/model/gguf.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model::families {

// What one tensor does in a Llama block (Hugging Face checkpoints, whose names differ from GGUF's).
enum class Role { token_embedding, output_norm, output, attn_norm, q, k, v, o, ffn_norm, gate, up, down };

// The GGUF keys of one file as a family reads them: "<arch>.<key>" by its short name, each read remembered,
// so that the keys nobody read can be refused (unread_key()).
class KeyReader {
 public:
  KeyReader(const GgufFile& file, std::string arch) : file_(file), arch_(std::move(arch)) {}
  const std::string& arch() const { return arch_; }
  std::string where() const { return "GGUF " + file_.name(); }
  std::string full(std::string_view key) const { return arch_ + "." + std::string(key); }

  protocol::Result<std::optional<uint64_t>> uint(std::string_view key);
  protocol::Result<std::optional<double>> real(std::string_view key);
  protocol::Result<std::optional<std::string>> string(std::string_view key);
  // Any type (arrays included); null when missing.
  const GgufValue* value(std::string_view key);
  // A uint key that llama.cpp also accepts as an array of one value per layer (get_key_or_arr): the value,
  // which every layer must share (config_error otherwise: per-layer shapes are not supported).
  protocol::Result<std::optional<uint64_t>> uniform_uint(std::string_view key);

  // The first metadata key that changes what a model computes and that nobody read: "<arch>.*" keys, and
  // any namespace but general.*, tokenizer.* and quantize.* (names only: what the file says of itself and
  // of how it was quantized). Empty when there is none.
  std::string unread_key() const;

 private:
  const GgufFile& file_;
  std::string arch_;
  std::set<std::string, std::less<>> read_;
};

// What a family's blocks hold besides Llama's (attention norm, Q/K/V or fused QKV with optional biases,
// attention output, FFN norm, gate/up/down), each as llama.cpp's loader takes it for the architecture.
struct BlockLayout {
  bool qk_norm = false;        // attn_q_norm, attn_k_norm (head_dim each): RMSNorm of each Q and K head
  bool post_norms = false;     // post_attention_norm, post_ffw_norm: RMSNorm of each sublayer's output
  bool fused_gate_up = false;  // ffn_up holds the gate rows then the up rows (2 x ffn), no ffn_gate
  bool out_bias = false;       // optional attn_output.bias
  bool ffn_biases = false;     // optional ffn_gate.bias, ffn_up.bias, ffn_down.bias
  bool output_bias = false;    // optional output.bias
  // Mixture of experts in every block: ffn_gate_inp (the router), ffn_{gate,up,down}_exps (3-D) in place of
  // ffn_gate/up/down; expert_count, expert_used_count and expert_feed_forward_length read.
  bool experts = false;
  // Frequency factors of the rotary embedding: rope_freqs (Llama 3), or rope_factors_long / _short
  // (Phi-3's LongRoPE, the long ones when the context exceeds the original one).
  enum class RopeFactors : uint8_t { none, freqs, long_short } rope_factors = RopeFactors::none;
};

struct DecoderFamily {
  std::string_view name;           // "llama"
  std::string_view gguf_arch;      // general.architecture
  std::string_view hf_model_type;  // config.json's model_type; empty: GGUF files only
  std::string_view examples;       // models people run, for the docs and errors
  detail::RopeStyle rope_style;
  BlockLayout layout;
  // The family's own keys (after the loader's common ones, arch already holding them): what they select in
  // arch, or an error naming a key whose value epd does not run.
  protocol::Status (*read_keys)(KeyReader& keys, const ModelConfig& cfg, detail::DecoderArch& arch);
  // The keys read_keys reads (short names), for the docs and the test that walks llama.cpp's key list.
  std::span<const std::string_view> keys;
  // Hugging Face tensor names (null: no Hugging Face checkpoints of this family).
  std::string (*hf_tensor)(Role role, uint32_t layer) = nullptr;
};

// read_keys of a family with no keys of its own.
protocol::Status no_own_keys(KeyReader& keys, const ModelConfig& cfg, detail::DecoderArch& arch);

std::span<const DecoderFamily* const> decoder_families();
const DecoderFamily* family_by_gguf_arch(std::string_view arch);
const DecoderFamily* family_by_hf_model_type(std::string_view model_type);
// "llama, qwen2, ..." for errors that list what is supported.
std::string family_names();

// The GGUF tensor names the loader may take for a family, with "%d" for a block's number (the test that
// walks llama.cpp's own lists of tensors uses it to tell what epd runs from what it must refuse).
std::vector<std::string> gguf_tensor_patterns(const DecoderFamily& family);
// The "<arch>.*" keys (short names) the loader may read for a family: every family's, then its own.
std::vector<std::string> gguf_key_names(const DecoderFamily& family);

// The families (one definition each, in families/<name>.cpp).
extern const DecoderFamily kLlama;
extern const DecoderFamily kMistral3;
extern const DecoderFamily kQwen2;
extern const DecoderFamily kQwen2Vl;
extern const DecoderFamily kQwen3;
extern const DecoderFamily kGemma3;
extern const DecoderFamily kPhi3;
extern const DecoderFamily kQwen3Moe;

}  // namespace epd::model::families
