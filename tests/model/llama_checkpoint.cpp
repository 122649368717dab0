#include "llama_checkpoint.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
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

// A tensor's values are made when a writer needs them, so a checkpoint of billions of parameters is never
// whole in memory (each tensor's values come from its own random stream: making them twice gives the same).
struct Tensor {
  std::string hf_name, gguf_name;
  std::vector<uint64_t> shape;               // PyTorch order
  std::function<std::vector<float>()> make;  // HF layout (Q/K rows in rotate-half order)
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

bool interleaved_rope(const CheckpointSpec& s) {
  return s.arch == "llama" || s.arch == "mistral3";
}

uint32_t head_dim_of(const CheckpointSpec& s) {
  return s.head_dim ? s.head_dim : s.d_model / s.heads;
}

// Llama 3.1's frequency factors (convert_hf_to_gguf's rope_freqs, scale 8, low/high frequency factors 1
// and 4) for an original context of `orig` positions: pairs of long wavelength turn 8 times slower.
std::vector<float> llama3_factors(uint32_t dims, float base, uint32_t orig) {
  std::vector<float> out;
  const double low_wavelen = orig / 1.0, high_wavelen = orig / 4.0;
  for (uint32_t i = 0; i < dims / 2; ++i) {
    const double freq = std::pow(double(base), -2.0 * i / dims), wavelen = 2 * M_PI / freq;
    if (wavelen < high_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      out.push_back(8.0f);
    } else {
      const double smooth = (orig / wavelen - 1.0) / (4.0 - 1.0);
      out.push_back(static_cast<float>(1.0 / ((1 - smooth) / 8.0 + smooth)));
    }
  }
  return out;
}

std::vector<Tensor> make_tensors(const CheckpointSpec& s) {
  const uint64_t d = s.d_model, hd = head_dim_of(s), q = uint64_t{s.heads} * hd,
                 kv = uint64_t{s.kv_heads} * hd;
  const bool interleaved = interleaved_rope(s), gemma = s.arch == "gemma3", phi = s.arch == "phi3";
  const bool moe = s.arch == "qwen3moe";
  const bool qk_norm = s.arch == "qwen3" || moe || gemma,
             qkv_bias = s.qkv_bias || s.arch == "qwen2" || s.arch == "qwen2vl";
  const bool fused_qkv = s.fused_qkv || phi;
  std::vector<Tensor> t;
  uint64_t tag = 1;
  auto add = [&](std::string hf, std::string gg, std::vector<uint64_t> shape, float a, Dt dt,
                 bool norm = false, uint32_t rope_heads = 0) {
    uint64_t n = 1;
    for (auto x : shape) n *= x;
    const Dt stored = s.mixed_dtypes ? dt : Dt::f32;
    auto make = [seed = s.seed, tag = tag++, n, a, norm, stored] {
      std::vector<float> v = uniform(seed, tag, n, a);
      if (norm)
        for (float& x : v) x = 1.0f + x;  // gains near 1
      round_to(v, stored);
      return v;
    };
    t.push_back(Tensor{std::move(hf), std::move(gg), std::move(shape), std::move(make), stored,
                       interleaved ? rope_heads : 0});
  };
  auto gain = [](uint64_t fan_in, float g) { return g * std::sqrt(3.0f / static_cast<float>(fan_in)); };
  add("model.embed_tokens.weight", "token_embd.weight", {s.vocab, d}, gemma ? 0.2f : 1.0f, Dt::f32);
  for (uint32_t l = 0; l < s.layers; ++l) {
    const std::string hf = "model.layers." + std::to_string(l) + ".", gg = "blk." + std::to_string(l) + ".";
    const Dt dt = l % 2 == 0 ? Dt::bf16 : Dt::f16;
    add(hf + "input_layernorm.weight", gg + "attn_norm.weight", {d}, 0.1f, Dt::f32, true);
    if (fused_qkv) {
      // Q, K and V rows one after the other, each as the separate matrices would hold them.
      std::vector<Tensor> parts;
      for (auto [rows, heads, a] :
           {std::tuple{q, s.heads, 2.0f}, std::tuple{kv, s.kv_heads, 2.0f}, std::tuple{kv, 0u, 1.0f}}) {
        add("", "", {rows, d}, gain(d, a), dt, false, heads);
        parts.push_back(std::move(t.back()));
        t.pop_back();
      }
      auto make = [parts = std::move(parts)] {
        std::vector<float> all;
        for (const Tensor& p : parts) {
          const auto values = p.make();
          const auto rows =
              p.rope_heads ? permute_for_gguf(values, p.rope_heads, p.shape[0], p.shape[1]) : values;
          all.insert(all.end(), rows.begin(), rows.end());
        }
        return all;
      };
      t.push_back(Tensor{"", gg + "attn_qkv.weight", {q + 2 * kv, d}, std::move(make), dt, 0});
      if (qkv_bias) add("", gg + "attn_qkv.bias", {q + 2 * kv}, 0.5f, Dt::f32);
    } else {
      add(hf + "self_attn.q_proj.weight", gg + "attn_q.weight", {q, d}, gain(d, 2.0f), dt, false, s.heads);
      add(hf + "self_attn.k_proj.weight", gg + "attn_k.weight", {kv, d}, gain(d, 2.0f), dt, false,
          s.kv_heads);
      add(hf + "self_attn.v_proj.weight", gg + "attn_v.weight", {kv, d}, gain(d, 1.0f), dt);
      if (qkv_bias) {
        // A bias is rotated with its rows: the converter permutes Q and K biases as it permutes the rows.
        add("", gg + "attn_q.bias", {q}, 0.5f, Dt::f32, false, s.heads);
        add("", gg + "attn_k.bias", {kv}, 0.5f, Dt::f32, false, s.kv_heads);
        add("", gg + "attn_v.bias", {kv}, 0.5f, Dt::f32);
      }
    }
    add(hf + "self_attn.o_proj.weight", gg + "attn_output.weight", {d, q}, gain(q, 1.0f), dt);
    if (s.out_bias) add("", gg + "attn_output.bias", {d}, 0.2f, Dt::f32);
    if (qk_norm) {
      add("", gg + "attn_q_norm.weight", {hd}, 0.2f, Dt::f32, true);
      add("", gg + "attn_k_norm.weight", {hd}, 0.2f, Dt::f32, true);
    }
    if (gemma) add("", gg + "post_attention_norm.weight", {d}, 0.1f, Dt::f32, true);
    add(hf + "post_attention_layernorm.weight", gg + "ffn_norm.weight", {d}, 0.1f, Dt::f32, true);
    if (moe) {
      const uint64_t e = s.experts, ef = s.expert_ffn;
      add("", gg + "ffn_gate_inp.weight", {e, d}, gain(d, 4.0f), Dt::f32);
      add("", gg + "ffn_gate_exps.weight", {e, ef, d}, gain(d, 1.0f), dt);
      add("", gg + "ffn_up_exps.weight", {e, ef, d}, gain(d, 1.0f), dt);
      add("", gg + "ffn_down_exps.weight", {e, d, ef}, gain(ef, 0.5f), dt);
    } else if (phi) {
      add("", gg + "ffn_up.weight", {2 * uint64_t{s.ffn}, d}, gain(d, 1.0f), dt);
    } else {
      add(hf + "mlp.gate_proj.weight", gg + "ffn_gate.weight", {s.ffn, d}, gain(d, 1.0f), dt);
      add(hf + "mlp.up_proj.weight", gg + "ffn_up.weight", {s.ffn, d}, gain(d, 1.0f), dt);
    }
    if (!moe) add(hf + "mlp.down_proj.weight", gg + "ffn_down.weight", {d, s.ffn}, gain(s.ffn, 0.5f), dt);
    if (gemma) add("", gg + "post_ffw_norm.weight", {d}, 0.1f, Dt::f32, true);
  }
  add("model.norm.weight", "output_norm.weight", {d}, 0.1f, Dt::f32, true);
  if (!s.tied) add("lm_head.weight", "output.weight", {s.vocab, d}, gain(d, 4.0f), Dt::bf16);
  const uint32_t dims = s.rope_dims ? s.rope_dims : static_cast<uint32_t>(hd);
  if (s.rope_freqs && phi) {
    for (const char* name : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
      add("", name, {dims / 2}, 0.5f, Dt::f32);
      t.back().make = [random = std::move(t.back().make), long_factors = name[13] == 'l'] {
        auto v = random();
        for (float& x : v) x = long_factors ? 2.0f + 1.5f * x : 1.0f + 0.5f * std::fabs(x);
        return v;
      };
    }
  } else if (s.rope_freqs) {
    t.push_back(Tensor{"",
                       "rope_freqs.weight",
                       {dims / 2},
                       [dims, base = s.rope_theta] { return llama3_factors(dims, base, 256); },
                       Dt::f32,
                       0});
  }
  for (const auto& [name, n] : s.extra_tensors) add("", name, {n}, 1.0f, Dt::f32);
  return t;
}

// One safetensors file: 8-byte header length, JSON header (padded with spaces to 8 bytes), data.
protocol::Status write_safetensors(const fs::path& path, const std::vector<const Tensor*>& tensors) {
  json header = json::object();
  std::vector<std::byte> data;
  for (const Tensor* t : tensors) {
    if (t->hf_name.empty()) continue;  // GGUF only (biases, factors)
    const uint64_t begin = data.size();
    const char* name = "F32";
    for (float x : t->make()) {
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
  const std::string a = s.arch + ".";
  const uint32_t hd = head_dim_of(s);
  w.set_string("general.architecture", s.arch);
  // Not the architecture's name: llama.cpp special-cases vocabularies by model name ("phi3" wants
  // <|endoftext|>).
  w.set_string("general.name", s.arch == "llama" ? "epd-test-llama" : "epd-test-model");
  w.set_u32(a + "context_length", s.context);
  w.set_u32(a + "embedding_length", s.d_model);
  w.set_u32(a + "block_count", s.layers);
  w.set_u32(a + "feed_forward_length", s.ffn);
  w.set_u32(a + "attention.head_count", s.heads);
  w.set_u32(a + "attention.head_count_kv", s.kv_heads);
  if (s.head_dim) {
    w.set_u32(a + "attention.key_length", hd);
    w.set_u32(a + "attention.value_length", hd);
  }
  w.set_u32(a + "rope.dimension_count", s.rope_dims ? s.rope_dims : hd);
  w.set_f32(a + "rope.freq_base", s.rope_theta);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", s.norm_eps);
  w.set_u32(a + "vocab_size", s.vocab);
  if (!s.rope_scaling.empty()) w.set_string(a + "rope.scaling.type", s.rope_scaling);
  if (s.rope_factor != 0) w.set_f32(a + "rope.scaling.factor", s.rope_factor);
  if (s.rope_orig_context) w.set_u32(a + "rope.scaling.original_context_length", s.rope_orig_context);
  if (s.rope_attn_factor != 0) w.set_f32(a + "rope.scaling.attn_factor", s.rope_attn_factor);
  if (s.sliding_window) w.set_u32(a + "attention.sliding_window", s.sliding_window);
  if (s.swa_pattern) w.set_u32(a + "attention.sliding_window_pattern", s.swa_pattern);
  if (s.rope_base_swa != 0) w.set_f32(a + "rope.freq_base_swa", s.rope_base_swa);
  if (!s.rope_sections.empty()) w.set_i32s(a + "rope.dimension_sections", s.rope_sections);
  if (s.arch == "qwen3moe") {
    w.set_u32(a + "expert_count", s.experts);
    w.set_u32(a + "expert_used_count", s.experts_used);
    w.set_u32(a + "expert_feed_forward_length", s.expert_ffn);
  }
  for (const auto& [key, value] : s.extra_u32_keys) w.set_u32(key, value);
  for (const auto& [key, value] : s.extra_f32_keys) w.set_f32(key, value);
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
    w.set_string("tokenizer.chat_template",
                 !s.chat_template.empty()
                     ? s.chat_template
                     : "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                       "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt "
                       "%}{{ '<|im_start|>assistant\\n' }}{% endif %}");
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
  if (!s.add_space_prefix) w.set_bool("tokenizer.ggml.add_space_prefix", false);
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_f32s("tokenizer.ggml.scores", scores);
  w.set_i32s("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.unknown_token_id", 0);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
  for (const Tensor& t : tensors) {
    std::vector<uint64_t> ne(t.shape.rbegin(), t.shape.rend());  // ggml order: innermost first
    const std::vector<float> values = t.rope_heads ? permute_for_gguf(t.make(), t.rope_heads, t.shape[0],
                                                                      t.shape.size() > 1 ? t.shape[1] : 1)
                                                   : t.make();
    const TensorType type = t.shape.size() < 2 || t.gguf_name.ends_with("ffn_gate_inp.weight")
                                ? TensorType::f32
                                : gguf_type(*ft, t, s.layers);
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
  if (spec.vocab < 259 + added || spec.heads == 0 || (!spec.head_dim && spec.d_model % spec.heads != 0))
    return protocol::make_error(protocol::ErrorCode::invalid_request, "bad checkpoint spec");
  const auto tensors = make_tensors(spec);
  CheckpointPaths p{(dir / "hf").string(), (dir / "model.gguf").string()};
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (spec.write_hf && spec.arch == "llama")
    if (auto st = write_hf(spec, tensors, p.hf_dir); !st) return st.error();
  if (auto st = write_gguf(spec, tensors, p.gguf); !st) return st.error();
  return p;
}

}  // namespace epd::model::testing
