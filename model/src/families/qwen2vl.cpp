// Qwen2-VL and Qwen2.5-VL's language models (llama.cpp's LLM_ARCH_QWEN2VL): Qwen2's blocks (Q/K/V biases,
// rotation in halves) with M-RoPE: the rotated pairs are cut into sections (rope.dimension_sections: for
// Qwen2.5-VL-7B 16, 24, 24, 0 pairs) that turn by a row's temporal, height, width and extra position. A text
// row's four are its position, an image row's its image's start and its (row, column) offsets
// (epd/model/positions.hpp), so the same file answers text exactly as a qwen2 one would.
#include "families/family.hpp"

namespace epd::model::families {
namespace {

using protocol::ErrorCode;

protocol::Status qwen2vl_keys(KeyReader& keys, const ModelConfig& cfg, detail::DecoderArch& arch) {
  const std::string key = keys.full("rope.dimension_sections");
  const GgufValue* v = keys.value("rope.dimension_sections");
  const auto fail = [&](const std::string& why) {
    return protocol::make_error(ErrorCode::config_error, keys.where() + ": " + key + " " + why);
  };
  if (!v) return fail("is missing (M-RoPE needs its sections)");
  if (v->type != GgufType::array || v->ints.size() != 4)
    return fail("must be an array of 4 integers (llama.cpp reads 4)");
  uint64_t sum = 0;
  for (size_t i = 0; i < 4; ++i) {
    if (v->ints[i] < 0 || v->ints[i] > 4096) return fail("has a section out of range");
    arch.rope.sections[i] = static_cast<uint32_t>(v->ints[i]);
    sum += arch.rope.sections[i];
  }
  // ggml_rope_multi: the sections cover at most the rotated pairs, and qwen2vl rotates whole heads.
  const uint32_t pairs = (arch.rope.dims ? arch.rope.dims : cfg.head_dim) / 2;
  if (sum == 0 || sum > pairs)
    return fail("sums to " + std::to_string(sum) + " pairs, not 1.." + std::to_string(pairs) +
                " (the rotated pairs of a head)");
  if (arch.rope.dims != 0 && arch.rope.dims != cfg.head_dim)
    return fail("comes with rope.dimension_count " + std::to_string(arch.rope.dims) +
                " != head_dim: llama.cpp's qwen2vl graph rotates whole heads");
  return {};
}

constexpr std::string_view kKeys[] = {"rope.dimension_sections"};

}  // namespace

const DecoderFamily kQwen2Vl{
    .name = "qwen2vl",
    .gguf_arch = "qwen2vl",
    .hf_model_type = "",
    .examples = "Qwen2-VL-2B/7B-Instruct, Qwen2.5-VL-3B/7B-Instruct (language model)",
    .rope_style = detail::RopeStyle::neox,
    // No LM-head bias: llama.cpp loads an optional output.bias for qwen2vl but its graph never adds it, so a
    // file with one is refused by name rather than answered otherwise than llama.cpp answers it.
    .layout = {},
    .read_keys = qwen2vl_keys,
    .keys = kKeys,
    .hf_tensor = nullptr,
};

}  // namespace epd::model::families
