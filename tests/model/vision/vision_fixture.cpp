#include "vision_fixture.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <system_error>
#include <vector>

#include "epd/model/rng.hpp"
#include "gguf_writer.hpp"
#include "llama_checkpoint.hpp"

namespace epd::model::testing {
namespace {

namespace fs = std::filesystem;

protocol::Error bad(const std::string& what) {
  return protocol::make_error(protocol::ErrorCode::invalid_request, "vision fixture: " + what);
}

// Writes the mmproj's tensors with deterministic uniform values, one stream per tensor.
class TensorMaker {
 public:
  TensorMaker(GgufWriter& w, uint64_t seed, bool f16) : w_(w), seed_(seed), f16_(f16) {}

  // A matrix [out, in] (ggml ne = {in, out}), uniform with variance gain^2 / fan_in.
  void matrix(const std::string& name, uint64_t in, uint64_t out, float gain) {
    auto v = values(in * out, gain * std::sqrt(3.0f / static_cast<float>(in)));
    if (f16_)
      w_.add_f16(name, {in, out}, v);
    else
      w_.add_f32(name, {in, out}, v);
  }
  // A vector of `n` values center + uniform(-a, a), f32.
  void vec(const std::string& name, uint64_t n, float center, float a) {
    auto v = values(n, a);
    for (float& x : v) x += center;
    w_.add_f32(name, {n}, v);
  }
  // Any f32 tensor (ggml order ne), uniform(-a, a).
  void f32(const std::string& name, std::vector<uint64_t> ne, float a) {
    uint64_t n = 1;
    for (uint64_t d : ne) n *= d;
    w_.add_f32(name, std::move(ne), values(n, a));
  }
  // A convolution kernel, f16 as the matrices (the converter stores Whisper's that way).
  void kernel(const std::string& name, std::vector<uint64_t> ne, float a) {
    uint64_t n = 1;
    for (uint64_t d : ne) n *= d;
    if (f16_)
      w_.add_f16(name, std::move(ne), values(n, a));
    else
      w_.add_f32(name, std::move(ne), values(n, a));
  }
  // An f32 tensor of given values (ggml order ne); takes no stream.
  void raw_f32(const std::string& name, std::vector<uint64_t> ne, const std::vector<float>& v) {
    w_.add_f32(name, std::move(ne), v);
  }
  // A LayerNorm: gains near 1, small biases.
  void layer_norm(const std::string& prefix, uint64_t n) {
    vec(prefix + ".weight", n, 1.0f, 0.1f);
    vec(prefix + ".bias", n, 0.0f, 0.05f);
  }

 private:
  std::vector<float> values(uint64_t n, float a) {
    SplitMix64 rng = tensor_stream(seed_, ++tag_);
    std::vector<float> v(n);
    for (float& x : v) x = rng.uniform_pm1() * a;
    return v;
  }
  GgufWriter& w_;
  uint64_t seed_;
  bool f16_;
  uint64_t tag_ = 0;
};

bool is_idefics3(const VisionSpec& s) {
  return s.projector == "idefics3";
}
bool is_pixtral(const VisionSpec& s) {
  return s.projector == "pixtral";
}
bool is_internvl(const VisionSpec& s) {
  return s.projector == "internvl";
}
bool is_gemma3(const VisionSpec& s) {
  return s.projector == "gemma3";
}
bool is_qwen25vl(const VisionSpec& s) {
  return s.projector == "qwen2.5vl";
}
bool is_qwen2vl(const VisionSpec& s) {  // Qwen2-VL or Qwen2.5-VL
  return s.projector == "qwen2vl" || is_qwen25vl(s);
}
bool is_minicpmv(const VisionSpec& s) {
  return s.projector == "minicpmv";
}
bool is_ultravox(const VisionSpec& s) {
  return s.projector == "ultravox";
}
bool is_qwen2a(const VisionSpec& s) {
  return s.projector == "qwen2a";
}
bool is_audio(const VisionSpec& s) {
  return is_ultravox(s) || is_qwen2a(s);
}

// libmtmd's Whisper front end: 16 kHz, 128 mel bins (whisper-large-v3's), 3000 frames (30 s) a chunk, halved
// by the stride-2 convolution into the positions.
constexpr uint32_t kMelBins = 128;
constexpr uint32_t kMelFrames = 3000;
constexpr uint32_t kAudioPositions = kMelFrames / 2;

// MiniCPM-V's tower learns 70 x 70 positions (SigLIP-400m at 980 / 14); clip.cpp buckets any patch grid
// into them, so the table has 4900 rows whatever the image size.
constexpr uint32_t kMinicpmvBuckets = 70;

// A LayerNorm ViT block with biases everywhere (CLIP, SigLIP; InternViT adds its layer scales).
void write_layer_norm_block(TensorMaker& t, const std::string& b, uint64_t d, uint64_t ff,
                            bool layer_scales) {
  t.layer_norm(b + "ln1", d);
  for (const std::string m : {"attn_q", "attn_k", "attn_v"}) {
    t.matrix(b + m + ".weight", d, d, m == "attn_v" ? 1.0f : 1.5f);  // q, k: attention not uniform
    t.vec(b + m + ".bias", d, 0.0f, 0.05f);
  }
  t.matrix(b + "attn_out.weight", d, d, 0.7f);
  t.vec(b + "attn_out.bias", d, 0.0f, 0.05f);
  if (layer_scales) t.vec(b + "ls1.weight", d, 0.5f, 0.1f);
  t.layer_norm(b + "ln2", d);
  t.matrix(b + "ffn_up.weight", d, ff, 1.0f);
  t.vec(b + "ffn_up.bias", ff, 0.0f, 0.05f);
  t.matrix(b + "ffn_down.weight", ff, d, 0.7f);
  t.vec(b + "ffn_down.bias", d, 0.0f, 0.05f);
  if (layer_scales) t.vec(b + "ls2.weight", d, 0.5f, 0.1f);
}

// InternVL's tower and projector (the header's comment says which tensors and why).
void write_internvl_tensors(TensorMaker& t, const VisionSpec& s, const VisionLayout& l) {
  const uint64_t d = s.vision_width, ff = s.vision_ffn, out = l.output_width, p = l.patch_size;
  const uint64_t side = l.image_size / l.patch_size;
  t.f32("v.patch_embd.weight", {p, p, 3, d}, std::sqrt(3.0f / static_cast<float>(3 * p * p)));
  t.vec("v.patch_embd.bias", d, 0.0f, 0.05f);
  t.vec("v.class_embd", d, 0.0f, 0.5f);
  t.f32("v.position_embd.weight", {d, side * side + 1}, 0.5f);
  for (uint32_t i = 0; i < s.vision_layers; ++i) {
    const std::string b = "v.blk." + std::to_string(i) + ".";
    write_layer_norm_block(t, b, d, ff, /*layer_scales=*/true);
  }
  const uint64_t in = d * l.scale_factor * l.scale_factor;
  t.layer_norm("mm.model.mlp.0", in);
  t.matrix("mm.model.mlp.1.weight", in, out, 1.0f);
  t.vec("mm.model.mlp.1.bias", out, 0.0f, 0.05f);
  t.matrix("mm.model.mlp.3.weight", out, out, 1.0f);
  t.vec("mm.model.mlp.3.bias", out, 0.0f, 0.05f);
}

// Pixtral's tower and projector (the header's comment says which tensors and why).
void write_pixtral_tensors(TensorMaker& t, const VisionSpec& s, const VisionLayout& l) {
  const uint64_t d = s.vision_width, ff = s.vision_ffn, out = l.output_width, p = l.patch_size;
  t.f32("v.patch_embd.weight", {p, p, 3, d}, std::sqrt(3.0f / static_cast<float>(3 * p * p)));
  t.vec("v.pre_ln.weight", d, 1.0f, 0.1f);
  for (uint32_t i = 0; i < s.vision_layers; ++i) {
    const std::string b = "v.blk." + std::to_string(i) + ".";
    t.vec(b + "ln1.weight", d, 1.0f, 0.1f);
    for (const std::string m : {"attn_q", "attn_k", "attn_v"})
      t.matrix(b + m + ".weight", d, d, m == "attn_v" ? 1.0f : 1.5f);
    t.matrix(b + "attn_out.weight", d, d, 0.7f);
    t.vec(b + "ln2.weight", d, 1.0f, 0.1f);
    t.matrix(b + "ffn_gate.weight", d, ff, 1.0f);
    t.matrix(b + "ffn_up.weight", d, ff, 1.0f);
    t.matrix(b + "ffn_down.weight", ff, d, 0.7f);
  }
  if (l.scale_factor > 1) {
    t.vec("mm.input_norm.weight", d, 1.0f, 0.1f);
    t.matrix("mm.patch_merger.weight", d * l.scale_factor * l.scale_factor, d, 1.0f);
  }
  t.matrix("mm.1.weight", d, out, 0.5f);
  t.vec("mm.1.bias", out, 0.0f, 0.05f);
  t.matrix("mm.2.weight", out, out, 1.0f);
  t.vec("mm.2.bias", out, 0.0f, 0.05f);
  t.vec("v.token_embd.img_break", out, 0.0f, 1.0f);
}

// Qwen2-VL's and Qwen2.5-VL's tower and merger (the header's comment says which tensors and why).
void write_qwen2vl_tensors(TensorMaker& t, const VisionSpec& s, const VisionLayout& l) {
  const uint64_t d = s.vision_width, ff = s.vision_ffn, out = l.output_width, p = l.patch_size;
  const bool v25 = is_qwen25vl(s);
  // The Conv3D's two temporal slices: a still image is both frames, so it meets both kernels.
  for (const char* name : {"v.patch_embd.weight", "v.patch_embd.weight.1"})
    t.f32(name, {p, p, 3, d}, std::sqrt(1.5f / static_cast<float>(3 * p * p)));
  for (uint32_t i = 0; i < s.vision_layers; ++i) {
    const std::string b = "v.blk." + std::to_string(i) + ".";
    if (!v25) {
      write_layer_norm_block(t, b, d, ff, /*layer_scales=*/false);
      continue;
    }
    t.vec(b + "ln1.weight", d, 1.0f, 0.1f);  // RMSNorm
    for (const std::string m : {"attn_q", "attn_k", "attn_v"}) {
      t.matrix(b + m + ".weight", d, d, m == "attn_v" ? 1.0f : 1.5f);
      t.vec(b + m + ".bias", d, 0.0f, 0.05f);
    }
    t.matrix(b + "attn_out.weight", d, d, 0.7f);
    t.vec(b + "attn_out.bias", d, 0.0f, 0.05f);
    t.vec(b + "ln2.weight", d, 1.0f, 0.1f);
    for (const std::string m : {"ffn_gate", "ffn_up"}) {
      t.matrix(b + m + ".weight", d, ff, 1.0f);
      t.vec(b + m + ".bias", ff, 0.0f, 0.05f);
    }
    t.matrix(b + "ffn_down.weight", ff, d, 0.7f);
    t.vec(b + "ffn_down.bias", d, 0.0f, 0.05f);
  }
  // The merger: its norm (ln_q) on each patch, then 2 x 2 neighbours' features -> mm.0 -> GELU -> mm.2.
  if (v25)
    t.vec("v.post_ln.weight", d, 1.0f, 0.1f);
  else
    t.layer_norm("v.post_ln", d);
  t.matrix("mm.0.weight", 4 * d, 4 * d, 1.0f);
  t.vec("mm.0.bias", 4 * d, 0.0f, 0.05f);
  t.matrix("mm.2.weight", 4 * d, out, 1.0f);
  t.vec("mm.2.bias", out, 0.0f, 0.05f);
}

// MiniCPM-V's resampler (the header's comment says which tensors and why): one cross-attention of
// query_num learned queries over the tower's rows, then ln_post and proj.
void write_resampler_tensors(TensorMaker& t, const VisionSpec& s, const VisionLayout& l) {
  const uint64_t d = s.vision_width, out = l.output_width, n = kMinicpmvBuckets;
  t.f32("resampler.query", {out, l.rows_per_chunk}, 1.0f);
  t.matrix("resampler.kv.weight", d, out, 1.0f);
  t.layer_norm("resampler.ln_q", out);
  t.layer_norm("resampler.ln_kv", out);
  for (const std::string m : {"q", "k", "v"}) {
    t.matrix("resampler.attn." + m + ".weight", out, out, m == "v" ? 1.0f : 1.5f);
    t.vec("resampler.attn." + m + ".bias", out, 0.0f, 0.05f);
  }
  t.matrix("resampler.attn.out.weight", out, out, 0.7f);
  t.vec("resampler.attn.out.bias", out, 0.0f, 0.05f);
  t.layer_norm("resampler.ln_post", out);
  t.matrix("resampler.proj.weight", out, out, 0.6f);  // rows of about the token embeddings' norm
  // The converter's 2-D sin-cos table over 70 x 70 cells (x's half, then y's); clip.cpp's graph computes
  // the same keys' positions itself and only requires the tensor.
  std::vector<float> pos(out * n * n);
  const uint64_t quarter = out / 4;
  for (uint64_t y = 0; y < n; ++y)
    for (uint64_t x = 0; x < n; ++x) {
      float* row = &pos[(y * n + x) * out];
      for (uint64_t i = 0; i < quarter; ++i) {
        const double omega = std::pow(10000.0, -double(i) / double(quarter));
        row[i] = float(std::sin(double(x) * omega));
        row[quarter + i] = float(std::cos(double(x) * omega));
        row[2 * quarter + i] = float(std::sin(double(y) * omega));
        row[3 * quarter + i] = float(std::cos(double(y) * omega));
      }
    }
  t.raw_f32("resampler.pos_embed_k", {out, n * n}, pos);
}

// Ultravox's or Qwen2-Audio's mmproj: a Whisper encoder and its projector (the header's comment says which
// tensors and why), with the keys llama.cpp's converter writes for an audio-only file.
protocol::Status write_audio_mmproj(const VisionSpec& s, const VisionLayout& l, const fs::path& path) {
  const bool uvx = is_ultravox(s);
  const uint64_t d = s.vision_width, ff = s.vision_ffn, out = l.output_width;
  GgufWriter w;
  w.set_string("general.architecture", "clip");
  w.set_string("general.type", "mmproj");
  w.set_string("general.name", uvx ? "epd-test-ultravox-mmproj" : "epd-test-qwen2audio-mmproj");
  w.set_u32("general.file_type", s.f16_matrices ? 1 : 0);
  w.set_bool("clip.has_audio_encoder", true);  // no clip.has_vision_encoder key, as the converter writes
  w.set_string("clip.projector_type", s.projector);
  w.set_u32("clip.audio.projection_dim", l.output_width);
  w.set_u32("clip.audio.embedding_length", s.vision_width);
  w.set_u32("clip.audio.feed_forward_length", s.vision_ffn);
  w.set_u32("clip.audio.block_count", s.vision_layers);
  w.set_u32("clip.audio.attention.head_count", s.vision_heads);
  w.set_u32("clip.audio.num_mel_bins", kMelBins);
  w.set_f32("clip.audio.attention.layer_norm_epsilon", 1e-5f);
  if (uvx) w.set_u32("clip.audio.projector.stack_factor", l.scale_factor);

  TensorMaker t(w, s.seed, s.f16_matrices);
  // The convolutions (ggml ne {kernel, in, out}); the biases are stored as columns, ne {1, out}.
  t.kernel("a.conv1d.1.weight", {3, kMelBins, d}, std::sqrt(3.0f / float(3 * kMelBins)));
  t.f32("a.conv1d.1.bias", {1, d}, 0.05f);
  t.kernel("a.conv1d.2.weight", {3, d, d}, std::sqrt(3.0f / float(3 * d)));
  t.f32("a.conv1d.2.bias", {1, d}, 0.05f);
  t.f32("a.position_embd.weight", {d, kAudioPositions}, 0.5f);
  for (uint32_t i = 0; i < s.vision_layers; ++i) {
    const std::string b = "a.blk." + std::to_string(i) + ".";
    t.layer_norm(b + "ln1", d);
    for (const std::string m : {"attn_q", "attn_k", "attn_v"}) {
      t.matrix(b + m + ".weight", d, d, m == "attn_v" ? 1.0f : 1.5f);
      if (m != "attn_k") t.vec(b + m + ".bias", d, 0.0f, 0.05f);  // Whisper's K has none
    }
    t.matrix(b + "attn_out.weight", d, d, 0.7f);
    t.vec(b + "attn_out.bias", d, 0.0f, 0.05f);
    t.layer_norm(b + "ln2", d);
    t.matrix(b + "ffn_up.weight", d, ff, 1.0f);
    t.vec(b + "ffn_up.bias", ff, 0.0f, 0.05f);
    t.matrix(b + "ffn_down.weight", ff, d, 0.7f);
    t.vec(b + "ffn_down.bias", d, 0.0f, 0.05f);
  }
  t.layer_norm("a.post_ln", d);
  if (uvx) {
    // Stacked rows -> RMSNorm -> mm.1 -> SwiGLU (halves swapped) -> RMSNorm -> mm.2, no biases.
    const uint64_t in = d * l.scale_factor;
    t.vec("mm.a.norm_pre.weight", in, 1.0f, 0.1f);
    t.matrix("mm.a.mlp.1.weight", in, 4 * out, 1.0f);
    t.vec("mm.a.norm_mid.weight", 2 * out, 1.0f, 0.1f);
    t.matrix("mm.a.mlp.2.weight", 2 * out, out, 0.6f);  // rows of about the token embeddings' norm
  } else {
    t.matrix("mm.a.fc.weight", d, out, 0.6f);
    t.vec("mm.a.fc.bias", out, 0.0f, 0.05f);
  }
  return w.write(path.string());
}

protocol::Status write_mmproj(const VisionSpec& s, const VisionLayout& l, const fs::path& path) {
  if (is_audio(s)) return write_audio_mmproj(s, l, path);
  const bool gem = is_gemma3(s), mcv = is_minicpmv(s), pix = is_pixtral(s), ivl = is_internvl(s);
  const bool sig = is_idefics3(s) || gem || mcv;  // a SigLIP tower
  const bool qvl = is_qwen2vl(s);
  const uint64_t d = s.vision_width, ff = s.vision_ffn, out = l.output_width;
  const uint64_t side = l.image_size / l.patch_size;
  const uint64_t n_pos = mcv ? kMinicpmvBuckets * kMinicpmvBuckets : side * side;
  GgufWriter w;
  w.set_string("general.architecture", "clip");
  w.set_string("general.type", "mmproj");
  w.set_string("general.name", gem   ? "epd-test-gemma3-mmproj"
                               : mcv ? "epd-test-minicpmv-mmproj"
                               : sig ? "epd-test-smolvlm-mmproj"
                               : pix ? "epd-test-pixtral-mmproj"
                               : ivl ? "epd-test-internvl-mmproj"
                               : qvl ? "epd-test-qwen2vl-mmproj"
                                     : "epd-test-llava-mmproj");
  w.set_u32("general.file_type", s.f16_matrices ? 1 : 0);
  w.set_bool("clip.has_vision_encoder", true);
  w.set_string("clip.projector_type", mcv              ? "resampler"
                                      : !qvl           ? s.projector
                                      : is_qwen25vl(s) ? "qwen2.5vl_merger"
                                                       : "qwen2vl_merger");
  w.set_bool("clip.use_gelu", sig || ivl);                       // SigLIP, InternViT: GELU; CLIP: quick GELU
  if (pix || is_qwen25vl(s)) w.set_bool("clip.use_silu", true);  // Pixtral, Qwen2.5-VL: gated SiLU
  w.set_u32("clip.vision.image_size", l.image_size);
  w.set_u32("clip.vision.patch_size", l.patch_size);
  w.set_u32("clip.vision.embedding_length", s.vision_width);
  w.set_u32("clip.vision.feed_forward_length", s.vision_ffn);
  w.set_u32("clip.vision.block_count", s.vision_layers);
  w.set_u32("clip.vision.attention.head_count", s.vision_heads);
  w.set_f32("clip.vision.attention.layer_norm_epsilon", sig ? 1e-6f : 1e-5f);
  w.set_u32("clip.vision.projection_dim", l.output_width);
  const float clip_mean[] = {0.48145466f, 0.4578275f, 0.40821073f};
  const float clip_std[] = {0.26862954f, 0.26130258f, 0.27577711f};
  const float half[] = {0.5f, 0.5f, 0.5f};
  w.set_f32s("clip.vision.image_mean", std::span<const float>(sig ? half : clip_mean, 3));
  w.set_f32s("clip.vision.image_std", std::span<const float>(sig ? half : clip_std, 3));
  if (sig && !mcv) w.set_u32("clip.vision.projector.scale_factor", l.scale_factor);
  if (sig && !gem && !mcv) w.set_u32("clip.vision.preproc_image_size", l.preproc_image_size);
  if (mcv) {  // as the converter writes them (the version an int32)
    w.set_i32("clip.minicpmv_version", int32_t(s.minicpmv_version));
    w.set_u32("clip.minicpmv_query_num", l.rows_per_chunk);
  }
  if (pix && l.scale_factor > 1) w.set_u32("clip.vision.spatial_merge_size", l.scale_factor);
  if (!s.pinpoints.empty()) w.set_i32s("clip.vision.image_grid_pinpoints", s.pinpoints);
  if (is_qwen25vl(s)) w.set_u32("clip.vision.n_wa_pattern", 2);  // blocks 0 and 2 windowed, 1 full
  if (ivl) {
    w.set_u32("clip.vision.projector.scale_factor", l.scale_factor);
    w.set_u32("clip.vision.preproc_min_tiles", 1);
    w.set_u32("clip.vision.preproc_max_tiles", s.max_tiles);
  }

  TensorMaker t(w, s.seed, s.f16_matrices);
  if (pix || ivl || qvl) {
    if (pix) write_pixtral_tensors(t, s, l);
    if (ivl) write_internvl_tensors(t, s, l);
    if (qvl) write_qwen2vl_tensors(t, s, l);
    return w.write(path.string());
  }
  const uint64_t p = l.patch_size;
  // Patch embedding: a conv kernel, ggml ne = {p, p, 3, d}; normalized pixels are O(1).
  t.f32("v.patch_embd.weight", {p, p, 3, d}, std::sqrt(3.0f / static_cast<float>(3 * p * p)));
  if (sig) t.vec("v.patch_embd.bias", d, 0.0f, 0.05f);
  t.f32("v.position_embd.weight", {d, n_pos}, 0.5f);
  if (!sig) t.layer_norm("v.pre_ln", d);
  for (uint32_t i = 0; i < s.vision_layers; ++i) {
    const std::string b = "v.blk." + std::to_string(i) + ".";
    write_layer_norm_block(t, b, d, ff, /*layer_scales=*/false);
  }
  if (mcv) {
    t.layer_norm("v.post_ln", d);
    write_resampler_tensors(t, s, l);
  } else if (gem) {
    t.layer_norm("v.post_ln", d);
    t.vec("mm.soft_emb_norm.weight", d, 1.0f, 0.1f);
    t.matrix("mm.input_projection.weight", out, d, 0.6f * std::sqrt(float(out) / float(d)));  // transposed
  } else if (sig) {
    t.layer_norm("v.post_ln", d);
    const uint64_t in = d * l.scale_factor * l.scale_factor;
    t.matrix("mm.model.fc.weight", in, out, 0.6f);  // rows of about the token embeddings' norm
  } else {
    // The residual stream is not normalized at the end (no post_ln): scale the first projection down.
    t.matrix("mm.0.weight", d, out, 0.5f);
    t.vec("mm.0.bias", out, 0.0f, 0.05f);
    t.matrix("mm.2.weight", out, out, 1.0f);
    t.vec("mm.2.bias", out, 0.0f, 0.05f);
  }
  return w.write(path.string());
}

}  // namespace

protocol::Result<VisionLayout> vision_layout(const VisionSpec& s) {
  if (is_audio(s)) {
    VisionLayout l;
    l.audio = true;
    l.output_width = s.projector_width ? s.projector_width : s.lm_width;
    l.scale_factor = is_ultravox(s) ? s.stack_factor : 2;
    if (s.vision_heads == 0 || s.vision_width % s.vision_heads != 0 || s.vision_ffn == s.vision_width ||
        s.vision_layers < 1 || l.output_width == 0)
      return bad("bad audio tower shape");
    // libmtmd counts ceil(3000 / s) / 2 rows a chunk where its graph stacks 1500 rows into ceil(1500 / s)
    // and aborts when they differ (s = 8, the real files': 187 and 188). Such a file is still written:
    // epd must refuse it.
    const uint32_t sf = std::max(l.scale_factor, 1u);
    const uint32_t counted = (kMelFrames + sf - 1) / sf / 2;
    if (is_ultravox(s) && l.scale_factor == 0) return bad("ultravox's stack_factor must be positive");
    l.rows_per_chunk = is_ultravox(s) ? counted : kAudioPositions / 2;  // qwen2a: average pool by 2
    return l;
  }
  const bool gem = is_gemma3(s), sig = is_idefics3(s), pix = is_pixtral(s), ivl = is_internvl(s);
  const bool qvl = is_qwen2vl(s), mcv = is_minicpmv(s);
  const bool merged = pix && s.spatial_merge > 1;
  VisionLayout l;
  l.image_size = s.image_size ? s.image_size
                 : gem        ? 128
                 : sig        ? 32
                 : pix        ? (merged ? 1540 : 1024)
                 : ivl        ? 56
                              : 112;
  l.patch_size = s.patch_size ? s.patch_size : sig || gem ? 8 : pix ? (merged ? 14 : 16) : 14;
  l.scale_factor = gem          ? (s.scale_factor == 2 ? 4 : s.scale_factor)  // the default 2 is idefics3's
                   : sig || ivl ? s.scale_factor
                   : pix        ? std::max(s.spatial_merge, 1u)
                   : qvl        ? 2
                                : 1;
  l.preproc_image_size = sig ? (s.preproc_image_size ? s.preproc_image_size : 2 * l.image_size) : 0;
  l.output_width = s.projector_width ? s.projector_width : s.lm_width;
  if (l.patch_size == 0 || l.image_size % l.patch_size != 0)
    return bad("image_size must be a multiple of patch_size");
  const uint32_t side = l.image_size / l.patch_size;
  if ((sig || ivl || gem) && (l.scale_factor < 2 || side % l.scale_factor != 0))
    return bad("idefics3, internvl and gemma3 need scale_factor >= 2 dividing image_size / patch_size");
  // Pixtral's 2-D RoPE turns pairs of each half of a head; Qwen2-VL's M-RoPE has 4 sections of d_head / 4.
  if ((pix || qvl) && (s.vision_heads == 0 || (s.vision_width / s.vision_heads) % 4 != 0))
    return bad("pixtral and qwen2vl need a vision head size divisible by 4");
  if (s.vision_heads == 0 || s.vision_width % s.vision_heads != 0 || s.vision_ffn == s.vision_width ||
      s.vision_layers < 2 || l.output_width == 0)
    return bad("bad vision tower shape");
  l.rows_per_chunk = pix || qvl ? 0 : side * side / (l.scale_factor * l.scale_factor);
  if (mcv) {
    l.slices = true;
    l.rows_per_chunk = s.query_num ? s.query_num : s.minicpmv_version >= 3 ? 64 : 96;
    // clip.cpp's resampler has heads of 128 fixed and splits its sin-cos keys in quarters.
    if (l.output_width % 128 != 0)
      return bad(
          "minicpmv's resampler needs a projector width that is a multiple of 128 (e.g. lm_width 128)");
    if (s.vision_width == l.output_width)
      return bad("minicpmv needs vision_width != the projector width (the real kv_proj is then an identity)");
  }
  return l;
}

std::vector<uint8_t> make_test_wav(uint32_t sample_rate, uint32_t channels, double seconds, uint64_t seed) {
  const auto frames = static_cast<uint64_t>(std::llround(std::max(seconds, 0.0) * sample_rate));
  const uint64_t data_bytes = frames * channels * 2;
  std::vector<uint8_t> out;
  out.reserve(44 + data_bytes);
  auto put = [&](uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  auto tag = [&](const char* t) { out.insert(out.end(), t, t + 4); };
  tag("RIFF");
  put(36 + data_bytes, 4);
  tag("WAVE");
  tag("fmt ");
  put(16, 4);
  put(1, 2);  // PCM
  put(channels, 2);
  put(sample_rate, 4);
  put(uint64_t(sample_rate) * channels * 2, 4);
  put(channels * 2, 2);
  put(16, 2);
  tag("data");
  put(data_bytes, 4);
  // Per channel three tones (150 Hz .. 3 kHz) under a slow envelope, so that the mel frames vary in time
  // and across bins, plus noise.
  constexpr double kTwoPi = 6.283185307179586;
  std::vector<double> freq(3 * channels), phase(3 * channels);
  SplitMix64 pick = tensor_stream(seed, 0);
  for (size_t i = 0; i < freq.size(); ++i) {
    freq[i] = 150.0 + 1425.0 * (pick.uniform_pm1() + 1.0);
    phase[i] = kTwoPi * 0.5 * (pick.uniform_pm1() + 1.0);
  }
  SplitMix64 noise = tensor_stream(seed, 1);
  for (uint64_t f = 0; f < frames; ++f) {
    const double t = double(f) / sample_rate;
    for (uint32_t c = 0; c < channels; ++c) {
      double v = 0.0;
      for (uint32_t k = 0; k < 3; ++k) {
        const size_t i = 3 * c + k;
        const double envelope = 0.5 + 0.5 * std::sin(kTwoPi * (0.7 + 0.4 * k) * t + phase[i]);
        v += 0.25 * envelope * std::sin(kTwoPi * freq[i] * t + phase[i]);
      }
      v += 0.05 * noise.uniform_pm1();
      const auto q = static_cast<int16_t>(std::lround(std::clamp(v, -1.0, 1.0) * 32767.0));
      put(static_cast<uint16_t>(q), 2);
    }
  }
  return out;
}

protocol::Result<VisionModelPaths> write_vision_model(const VisionSpec& spec, const fs::path& dir) {
  auto layout = vision_layout(spec);
  if (!layout) return layout.error();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return bad("cannot create " + dir.string() + ": " + ec.message());

  CheckpointSpec lm;
  lm.d_model = spec.lm_width;
  lm.layers = spec.lm_layers;
  lm.heads = spec.lm_heads;
  lm.kv_heads = spec.lm_kv_heads;
  lm.ffn = 3 * spec.lm_width;
  lm.context = spec.lm_context;
  lm.seed = spec.seed + 1;
  lm.chat = true;
  lm.gguf_file_type = spec.lm_file_type;
  lm.write_hf = false;
  lm.extra_special_tokens = {"<fake_token_around_image>", "<global-img>"};
  for (int y = 1; y <= 6; ++y)
    for (int x = 1; x <= 6; ++x)
      lm.extra_special_tokens.push_back("<row_" + std::to_string(y) + "_col_" + std::to_string(x) + ">");
  if (is_pixtral(spec)) lm.extra_special_tokens.push_back("[IMG_END]");
  if (is_internvl(spec)) lm.extra_special_tokens.insert(lm.extra_special_tokens.end(), {"<img>", "</img>"});
  if (is_gemma3(spec)) {  // Gemma 3's language model: sliding window on layer 0, its image markers
    lm.arch = "gemma3";
    lm.sliding_window = 16;
    lm.swa_pattern = 2;  // layer 1 global: the answer reads the image
    lm.extra_special_tokens.insert(lm.extra_special_tokens.end(), {"<start_of_image>", "<end_of_image>"});
  }
  if (is_qwen2a(spec)) {  // Qwen2-Audio's language model: qwen2's blocks, its audio markers
    lm.arch = "qwen2";
    lm.extra_special_tokens.insert(lm.extra_special_tokens.end(), {"<|audio_bos|>", "<|audio_eos|>"});
  }
  if (is_minicpmv(spec)) {  // MiniCPM-V 2.6's language model is Qwen2; its image and slice markers
    lm.arch = "qwen2";
    lm.extra_special_tokens.insert(lm.extra_special_tokens.end(),
                                   {"<image>", "</image>", "<slice>", "</slice>"});
  }
  if (is_qwen2vl(spec)) {  // Qwen2-VL's language model: qwen2's blocks with M-RoPE, its image markers
    lm.arch = "qwen2vl";
    // Of a head's pairs a quarter turn by t, three eighths each by y and x, as Qwen2.5-VL's 16, 24, 24, 0
    // of 64 (2, 3, 3, 0 of a 16-wide head's 8).
    const int32_t pairs = int32_t(spec.lm_width / spec.lm_heads / 2);
    lm.rope_sections = {pairs / 4, pairs * 3 / 8, pairs * 3 / 8, 0};
    lm.extra_special_tokens.insert(lm.extra_special_tokens.end(), {"<|vision_start|>", "<|vision_end|>"});
  }
  lm.extra_tokens = {"\n\n"};
  // The checkpoint writer names its file model.gguf: write it in a scratch folder, then move it.
  const fs::path scratch = dir / ".lm-tmp";
  auto written = write_llama_checkpoint(lm, scratch);
  if (!written) return written.error();
  VisionModelPaths paths{(dir / "lm.gguf").string(), (dir / "mmproj.gguf").string()};
  fs::rename(written->gguf, paths.lm, ec);
  if (ec) return bad("cannot move " + written->gguf + ": " + ec.message());
  fs::remove_all(scratch, ec);
  if (auto st = write_mmproj(spec, *layout, paths.mmproj); !st) return st.error();
  return paths;
}

}  // namespace epd::model::testing
