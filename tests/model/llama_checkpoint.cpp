#include "llama_checkpoint.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "epd/model/kv_cache.hpp"
#include "epd/model/quantize.hpp"
#include "epd/model/rng.hpp"
#include "epd/model/tensor.hpp"
#include "gguf_writer.hpp"

namespace epd::model::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

enum class Dt { f32, bf16, f16 };

struct Tensor {
  std::string hf_name, gguf_name;
  std::vector<uint64_t> shape;  // PyTorch order
  std::vector<float> values;    // HF layout (Q/K rows in rotate-half order)
  Dt dt = Dt::f32;
  uint32_t rope_heads = 0;  // Q/K: heads whose rows the GGUF permutes
};

std::vector<float> uniform(uint64_t seed, uint64_t tag, size_t n, float a) {
  SplitMix64 rng = tensor_stream(seed, tag);
  std::vector<float> v(n);
  for (float& x : v) x = rng.uniform_pm1() * a;
  return v;
}

void round_to(std::vector<float>& v, Dt dt) {
  for (float& x : v)
    x = dt == Dt::bf16 ? bf16_to_f32(f32_to_bf16(x)) : dt == Dt::f16 ? f16_to_f32(f32_to_f16(x)) : x;
}

// llama.cpp's convert_hf_to_gguf permutation: per head, rows (half, 2) -> (2, half) transposed, so that the
// rotated pairs (i, i + half) become adjacent rows (2i, 2i + 1).
std::vector<float> permute_for_gguf(const std::vector<float>& w, uint32_t heads, uint64_t rows,
                                    uint64_t cols) {
  std::vector<float> out(w.size());
  const uint64_t hd = rows / heads, half = hd / 2;
  for (uint64_t h = 0; h < heads; ++h)
    for (uint64_t j = 0; j < 2; ++j)
      for (uint64_t i = 0; i < half; ++i)
        std::memcpy(&out[(h * hd + 2 * i + j) * cols], &w[(h * hd + j * half + i) * cols],
                    cols * sizeof(float));
  return out;
}

std::vector<Tensor> make_tensors(const CheckpointSpec& s) {
  const uint64_t d = s.d_model, hd = d / s.heads, q = uint64_t{s.heads} * hd, kv = uint64_t{s.kv_heads} * hd;
  std::vector<Tensor> t;
  uint64_t tag = 1;
  auto add = [&](std::string hf, std::string gg, std::vector<uint64_t> shape, float a, Dt dt,
                 bool norm = false, uint32_t rope_heads = 0) {
    uint64_t n = 1;
    for (auto x : shape) n *= x;
    std::vector<float> v = uniform(s.seed, tag++, n, a);
    if (norm)
      for (float& x : v) x = 1.0f + x;  // gains near 1
    round_to(v, s.mixed_dtypes ? dt : Dt::f32);
    t.push_back(Tensor{std::move(hf), std::move(gg), std::move(shape), std::move(v),
                       s.mixed_dtypes ? dt : Dt::f32, rope_heads});
  };
  auto gain = [](uint64_t fan_in, float g) { return g * std::sqrt(3.0f / static_cast<float>(fan_in)); };
  add("model.embed_tokens.weight", "token_embd.weight", {s.vocab, d}, 1.0f, Dt::f32);
  for (uint32_t l = 0; l < s.layers; ++l) {
    const std::string hf = "model.layers." + std::to_string(l) + ".", gg = "blk." + std::to_string(l) + ".";
    const Dt dt = l % 2 == 0 ? Dt::bf16 : Dt::f16;
    add(hf + "input_layernorm.weight", gg + "attn_norm.weight", {d}, 0.1f, Dt::f32, true);
    add(hf + "self_attn.q_proj.weight", gg + "attn_q.weight", {q, d}, gain(d, 2.0f), dt, false, s.heads);
    add(hf + "self_attn.k_proj.weight", gg + "attn_k.weight", {kv, d}, gain(d, 2.0f), dt, false, s.kv_heads);
    add(hf + "self_attn.v_proj.weight", gg + "attn_v.weight", {kv, d}, gain(d, 1.0f), dt);
    add(hf + "self_attn.o_proj.weight", gg + "attn_output.weight", {d, q}, gain(q, 1.0f), dt);
    add(hf + "post_attention_layernorm.weight", gg + "ffn_norm.weight", {d}, 0.1f, Dt::f32, true);
    add(hf + "mlp.gate_proj.weight", gg + "ffn_gate.weight", {s.ffn, d}, gain(d, 1.0f), dt);
    add(hf + "mlp.up_proj.weight", gg + "ffn_up.weight", {s.ffn, d}, gain(d, 1.0f), dt);
    add(hf + "mlp.down_proj.weight", gg + "ffn_down.weight", {d, s.ffn}, gain(s.ffn, 0.5f), dt);
  }
  add("model.norm.weight", "output_norm.weight", {d}, 0.1f, Dt::f32, true);
  if (!s.tied) add("lm_head.weight", "output.weight", {s.vocab, d}, gain(d, 4.0f), Dt::bf16);
  return t;
}

// One safetensors file: 8-byte header length, JSON header (padded with spaces to 8 bytes), data.
protocol::Status write_safetensors(const fs::path& path, const std::vector<const Tensor*>& tensors) {
  json header = json::object();
  std::vector<std::byte> data;
  for (const Tensor* t : tensors) {
    const uint64_t begin = data.size();
    const char* name = "F32";
    for (float x : t->values) {
      if (t->dt == Dt::f32) {
        data.resize(data.size() + 4);
        std::memcpy(data.data() + data.size() - 4, &x, 4);
      } else {
        const uint16_t h = t->dt == Dt::bf16 ? f32_to_bf16(x) : f32_to_f16(x);
        data.resize(data.size() + 2);
        std::memcpy(data.data() + data.size() - 2, &h, 2);
      }
    }
    if (t->dt != Dt::f32) name = t->dt == Dt::bf16 ? "BF16" : "F16";
    header[t->hf_name] = {{"dtype", name}, {"shape", t->shape}, {"data_offsets", {begin, data.size()}}};
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string h = header.dump();
  h.resize((h.size() + 7) / 8 * 8, ' ');
  const uint64_t len = h.size();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(&len), 8);
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  if (!f) return protocol::make_error(protocol::ErrorCode::io_error, "cannot write " + path.string());
  return {};
}

protocol::Status write_hf(const CheckpointSpec& s, const std::vector<Tensor>& tensors, const fs::path& dir) {
  fs::create_directories(dir);
  const json config = {{"architectures", {"LlamaForCausalLM"}},
                       {"model_type", "llama"},
                       {"hidden_act", "silu"},
                       {"vocab_size", s.vocab},
                       {"hidden_size", s.d_model},
                       {"intermediate_size", s.ffn},
                       {"num_hidden_layers", s.layers},
                       {"num_attention_heads", s.heads},
                       {"num_key_value_heads", s.kv_heads},
                       {"max_position_embeddings", s.context},
                       {"rms_norm_eps", s.norm_eps},
                       {"rope_theta", s.rope_theta},
                       {"rope_scaling", nullptr},
                       {"tie_word_embeddings", s.tied},
                       {"bos_token_id", 1},
                       {"eos_token_id", 2},
                       {"torch_dtype", "float32"}};
  std::ofstream(dir / "config.json") << config.dump(2);
  const uint32_t n = std::max<uint32_t>(1, s.shards);
  if (n == 1) {
    std::vector<const Tensor*> all;
    for (const auto& t : tensors) all.push_back(&t);
    return write_safetensors(dir / "model.safetensors", all);
  }
  json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
  for (uint32_t k = 0; k < n; ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05u-of-%05u.safetensors", k + 1, n);
    std::vector<const Tensor*> part;
    for (size_t i = k; i < tensors.size(); i += n) {
      part.push_back(&tensors[i]);
      index["weight_map"][tensors[i].hf_name] = name;
    }
    if (auto st = write_safetensors(dir / name, part); !st) return st;
  }
  std::ofstream(dir / "model.safetensors.index.json") << index.dump(2);
  return {};
}

struct FileType {
  const char* name;
  TensorType base;
  TensorType more_bits;  // attn_v and some ffn_down in the _M mixes (== base elsewhere)
  uint32_t llama_ftype;  // general.file_type, llama.cpp's numbering
};

constexpr FileType kFileTypes[] = {
    {"f32", TensorType::f32, TensorType::f32, 0},       {"f16", TensorType::f16, TensorType::f16, 1},
    {"bf16", TensorType::bf16, TensorType::bf16, 32},   {"q8_0", TensorType::q8_0, TensorType::q8_0, 7},
    {"q4_0", TensorType::q4_0, TensorType::q4_0, 2},    {"q4_1", TensorType::q4_1, TensorType::q4_1, 3},
    {"q5_0", TensorType::q5_0, TensorType::q5_0, 8},    {"q5_1", TensorType::q5_1, TensorType::q5_1, 9},
    {"q2_k", TensorType::q2_k, TensorType::q3_k, 10},   {"q3_k_m", TensorType::q3_k, TensorType::q4_k, 12},
    {"q4_k_m", TensorType::q4_k, TensorType::q6_k, 15}, {"q5_k_m", TensorType::q5_k, TensorType::q6_k, 17},
    {"q6_k", TensorType::q6_k, TensorType::q6_k, 18},
};

const FileType* find_file_type(const std::string& name) {
  for (const FileType& f : kFileTypes)
    if (name == f.name) return &f;
  return nullptr;
}

// llama-quantize's substitutes for k-quant rows that are not a multiple of 256 (SmolLM2's 576, say).
TensorType fallback(TensorType t, uint64_t cols) {
  if (cols % 256 == 0) return t;
  switch (t) {
    case TensorType::q2_k:
    case TensorType::q3_k:
      return TensorType::iq4_nl;
    case TensorType::q4_k:
      return TensorType::q5_0;
    case TensorType::q5_k:
      return TensorType::q5_1;
    case TensorType::q6_k:
      return TensorType::q8_0;
    default:
      return t;
  }
}

// The type llama-quantize gives a tensor of a file type (a simplified llama_tensor_get_type).
TensorType gguf_type(const FileType& f, const Tensor& t, uint32_t layers) {
  if (t.shape.size() < 2) return TensorType::f32;
  const uint64_t cols = t.shape.back();
  const bool quantized = is_quantized(f.base);
  if (t.gguf_name == "output.weight" && quantized && f.base != TensorType::q8_0)
    return fallback(TensorType::q6_k, cols);
  const auto dot = t.gguf_name.find('.');
  const uint32_t layer =
      dot == std::string::npos ? 0 : static_cast<uint32_t>(std::atoi(t.gguf_name.c_str() + dot + 1));
  // llama.cpp's use_more_bits: the first and last eighth of the layers and every third in between.
  const bool more = layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
  const bool up =
      t.gguf_name.ends_with("attn_v.weight") || (t.gguf_name.ends_with("ffn_down.weight") && more);
  return fallback(up ? f.more_bits : f.base, cols);
}

protocol::Status write_gguf(const CheckpointSpec& s, const std::vector<Tensor>& tensors,
                            const fs::path& path) {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("general.name", "epd-test-llama");
  w.set_u32("llama.context_length", s.context);
  w.set_u32("llama.embedding_length", s.d_model);
  w.set_u32("llama.block_count", s.layers);
  w.set_u32("llama.feed_forward_length", s.ffn);
  w.set_u32("llama.attention.head_count", s.heads);
  w.set_u32("llama.attention.head_count_kv", s.kv_heads);
  w.set_u32("llama.rope.dimension_count", s.d_model / s.heads);
  w.set_f32("llama.rope.freq_base", s.rope_theta);
  w.set_f32("llama.attention.layer_norm_rms_epsilon", s.norm_eps);
  w.set_u32("llama.vocab_size", s.vocab);
  const FileType* ft = find_file_type(s.gguf_file_type);
  if (!ft)
    return protocol::make_error(protocol::ErrorCode::invalid_request,
                                "unknown file type " + s.gguf_file_type);
  w.set_u32("general.file_type", ft->llama_ftype);
  // A SentencePiece-style vocabulary: <unk> <s> </s>, byte tokens <0xXX>, then word pieces.
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};  // unknown, control, control
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.push_back(buf);
    scores.push_back(0);
    types.push_back(6);  // byte
  }
  for (uint32_t i = static_cast<uint32_t>(tokens.size()); i < s.vocab; ++i) {
    tokens.push_back("\xE2\x96\x81w" + std::to_string(i));  // "▁w<i>"
    scores.push_back(-static_cast<float>(i));
    types.push_back(1);  // normal
  }
  if (s.chat) {
    for (const char* marker : {"<|im_start|>", "<|im_end|>"}) {
      const size_t id = 259 + (std::string_view(marker) == "<|im_end|>");
      tokens[id] = marker;
      scores[id] = 0;
      types[id] = 3;  // control
    }
    w.set_string(
        "tokenizer.chat_template",
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] "
        "+ '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' "
        "}}{% endif %}");
  }
  size_t next_id = s.chat ? 261 : 259;
  for (const auto* list : {&s.extra_special_tokens, &s.extra_tokens})
    for (const std::string& text : *list) {
      tokens[next_id] = text;
      scores[next_id] = 0;
      types[next_id] = list == &s.extra_special_tokens ? 3 : 1;  // control, normal
      ++next_id;
    }
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_f32s("tokenizer.ggml.scores", scores);
  w.set_i32s("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.unknown_token_id", 0);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  for (const Tensor& t : tensors) {
    std::vector<uint64_t> ne(t.shape.rbegin(), t.shape.rend());  // ggml order: innermost first
    const std::vector<float> values =
        t.rope_heads ? permute_for_gguf(t.values, t.rope_heads, t.shape[0], t.shape[1]) : t.values;
    const TensorType type = gguf_type(*ft, t, s.layers);
    if (type == TensorType::f32) {
      w.add_f32(t.gguf_name, ne, values);
      continue;
    }
    const uint64_t cols = t.shape.back();
    auto bytes = quantize_rows(type, values, values.size() / cols, cols);
    if (!bytes) return bytes.error();
    if (s.gguf_dequantized) {
      const TensorRef ref{t.gguf_name, type, t.shape, *bytes};
      std::vector<float> back(values.size());
      if (auto st = tensor_to_f32(ref, back); !st) return st;
      w.add_f32(t.gguf_name, ne, back);
      continue;
    }
    w.add_raw(t.gguf_name, ne, static_cast<uint32_t>(type), std::move(*bytes));
  }
  return w.write(path.string());
}

}  // namespace

protocol::Result<CheckpointPaths> write_llama_checkpoint(const CheckpointSpec& spec, const fs::path& dir) {
  const size_t added = (spec.chat ? 2 : 0) + spec.extra_special_tokens.size() + spec.extra_tokens.size();
  if (spec.vocab < 259 + added || spec.heads == 0 || spec.d_model % spec.heads != 0)
    return protocol::make_error(protocol::ErrorCode::invalid_request, "bad checkpoint spec");
  const auto tensors = make_tensors(spec);
  CheckpointPaths p{(dir / "hf").string(), (dir / "model.gguf").string()};
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (spec.write_hf)
    if (auto st = write_hf(spec, tensors, p.hf_dir); !st) return st.error();
  if (auto st = write_gguf(spec, tensors, p.gguf); !st) return st.error();
  return p;
}

}  // namespace epd::model::testing
