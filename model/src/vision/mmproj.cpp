// An mmproj's header and an image's or a clip's layout, after libmtmd (tools/mtmd of the pinned llama.cpp):
// the keys clip.cpp reads, the fixed-size, Idefics3 and dynamic-size (Pixtral, Qwen2-VL) preprocessors'
// sizes, Whisper's chunks, and the markers mtmd_tokenize emits.
#include "epd/model/mmproj.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "epd/model/audio.hpp"
#include "epd/model/gguf.hpp"
#include "epd/model/image.hpp"

namespace epd::model {
namespace {

// More pinpoints than any real file has (LLaVA-1.6's have 5 to 9): a hostile header, refused.
constexpr size_t kMaxPinpoints = 64;

protocol::Error bad(const std::string& path, const std::string& what) {
  return protocol::make_error(protocol::ErrorCode::config_error, "mmproj " + path + ": " + what);
}

// Projectors libmtmd runs that need what epd's runner lacks, and what that is.
std::optional<std::string> lacking(const std::string& projector) {
  static const std::string_view mrope[] = {"qwen3vl_merger", "mimovl",    "glm4v",     "paddleocr",
                                           "youtuvl",        "hunyuanvl", "exaone4_5", "muse-glimmer"};
  static const std::string_view non_causal[] = {"gemma4v", "gemma4uv", "deepseek4v"};
  for (auto p : mrope)
    if (projector == p)
      return "M-RoPE in another arrangement than Qwen2-VL's (its own image positions, deep stacks or "
             "markers)";
  for (auto p : non_causal)
    if (projector == p)
      return "non-causal attention over image rows in its own arrangement (Gemma 4's, DeepSeek's)";
  return std::nullopt;
}

protocol::Result<uint32_t> positive(const GgufFile& g, const std::string& key, bool required) {
  auto v = g.get_uint(key);
  if (!v) return bad(g.name(), v.error().detail);
  if (!*v) {
    if (required) return bad(g.name(), "missing " + key);
    return 0u;
  }
  if (**v == 0 || **v > 65536) return bad(g.name(), key + " = " + std::to_string(**v) + " is out of range");
  return uint32_t(**v);
}

// Each projector's header beyond image and patch size; returns the projector's output tensor (its rows are
// the embedding width).
using HeaderReader = protocol::Result<std::string> (*)(const GgufFile&, MmprojInfo&);

uint32_t patches_per_side(const MmprojInfo& info) {
  return info.image_size / info.patch_size;
}

// A scale factor (pixel shuffle) that divides the patches per side.
protocol::Status read_scale_factor(const GgufFile& g, MmprojInfo& info) {
  auto scale = positive(g, "clip.vision.projector.scale_factor", false);
  if (!scale) return scale.error();
  info.scale_factor = std::max(*scale, 1u);
  const uint32_t side = patches_per_side(info);
  if (side % info.scale_factor != 0)
    return bad(g.name(), "scale_factor " + std::to_string(info.scale_factor) + " does not divide " +
                             std::to_string(side) + " patches per side");
  const uint32_t merged = side / info.scale_factor;
  info.rows_per_image = merged * merged;
  return {};
}

protocol::Result<std::string> read_mlp(const GgufFile& g, MmprojInfo& info) {
  const uint32_t side = patches_per_side(info);
  info.rows_per_image = side * side;
  const GgufValue* v = g.find("clip.vision.image_grid_pinpoints");
  if (!v) return std::string("mm.2.weight");
  // clip.cpp reads (width, height) pairs as int32; tiles of whole image_size squares are what its tower
  // takes (a partial tile would have other positions).
  const std::string key = "clip.vision.image_grid_pinpoints";
  if (v->type != GgufType::array || v->elem != GgufType::i32 || v->ints.empty() || v->ints.size() % 2 ||
      v->ints.size() > 2 * kMaxPinpoints)
    return bad(g.name(),
               key + " must be 1 to " + std::to_string(kMaxPinpoints) + " (width, height) pairs of int32");
  for (size_t i = 0; i < v->ints.size(); i += 2) {
    const int64_t w = v->ints[i], h = v->ints[i + 1];
    if (w <= 0 || h <= 0 || w > kMaxImageSide || h > kMaxImageSide || w % info.image_size ||
        h % info.image_size)
      return bad(g.name(), key + " has " + std::to_string(w) + "x" + std::to_string(h) +
                               ", not whole tiles of image_size " + std::to_string(info.image_size));
    info.pinpoints.push_back({uint32_t(w), uint32_t(h)});
  }
  return std::string("mm.2.weight");
}

protocol::Result<std::string> read_pixtral(const GgufFile& g, MmprojInfo& info) {
  // clip.cpp: spatial_merge_size when the file has it (Mistral-Small-3.1's patch merger), else 1.
  auto merge = positive(g, "clip.vision.spatial_merge_size", false);
  if (!merge) return merge.error();
  info.scale_factor = std::max(*merge, 1u);
  if (info.scale_factor > 1 && !g.tensor("mm.patch_merger.weight"))
    return bad(g.name(), "spatial_merge_size " + std::to_string(info.scale_factor) +
                             " without the patch merger (mm.patch_merger.weight)");
  info.row_breaks = g.tensor("v.token_embd.img_break") != nullptr;
  return std::string("mm.2.weight");
}

protocol::Result<std::string> read_idefics3(const GgufFile& g, MmprojInfo& info) {
  if (auto st = read_scale_factor(g, info); !st) return st.error();
  auto edge = positive(g, "clip.vision.preproc_image_size", false);
  if (!edge) return edge.error();
  if (*edge == 0)
    return bad(g.name(),
               "idefics3 without clip.vision.preproc_image_size (older files) is not laid out by epd");
  info.longest_edge = *edge;
  if (g.find("clip.vision.image_min_pixels") || g.find("clip.vision.image_max_pixels"))
    return bad(g.name(), "idefics3 with image_min_pixels / image_max_pixels is not laid out by epd");
  return std::string("mm.model.fc.weight");
}

// Gemma 3: the tower's patches average-pooled by clip.vision.projector.scale_factor per side (default 4).
protocol::Result<std::string> read_gemma3(const GgufFile& g, MmprojInfo& info) {
  auto pool = positive(g, "clip.vision.projector.scale_factor", false);
  if (!pool) return pool.error();
  info.scale_factor = *pool ? *pool : 4;
  const uint32_t side = patches_per_side(info);
  if (side % info.scale_factor != 0)
    return bad(g.name(), "scale_factor " + std::to_string(info.scale_factor) + " does not divide " +
                             std::to_string(side) + " patches per side");
  info.rows_per_image = (side / info.scale_factor) * (side / info.scale_factor);
  info.bidirectional = true;
  return std::string("mm.input_projection.weight");
}

// InternVL: clip.cpp's candidates are every a x b tiles with min_tiles <= a * b <= max_tiles (defaults 1
// and 12), a tiles across first.
protocol::Result<std::string> read_internvl(const GgufFile& g, MmprojInfo& info) {
  if (auto st = read_scale_factor(g, info); !st) return st.error();
  auto lo = positive(g, "clip.vision.preproc_min_tiles", false);
  if (!lo) return lo.error();
  auto hi = positive(g, "clip.vision.preproc_max_tiles", false);
  if (!hi) return hi.error();
  const uint32_t min_tiles = *lo ? *lo : 1, max_tiles = *hi ? *hi : 12;
  if (min_tiles > max_tiles || max_tiles > kMaxPinpoints)
    return bad(g.name(), "preproc_min_tiles " + std::to_string(min_tiles) + " / preproc_max_tiles " +
                             std::to_string(max_tiles) +
                             ": not 1 <= min <= max <= " + std::to_string(kMaxPinpoints));
  for (uint32_t a = min_tiles; a <= max_tiles; ++a)
    for (uint32_t b = std::max((min_tiles + a - 1) / a, min_tiles); b <= std::min(max_tiles / a, max_tiles);
         ++b)
      info.pinpoints.push_back({a * info.image_size, b * info.image_size});
  if (info.pinpoints.empty())
    return bad(g.name(), "preproc_min_tiles / preproc_max_tiles allow no tile grid");
  return std::string("mm.model.mlp.3.weight");
}

// Qwen2-VL and Qwen2.5-VL: no layout keys beyond clip.vision.spatial_merge_size (2 when absent, and 2 is
// what libmtmd's token counts and graph assume: `/ (patch_size * 2)`, an assert that the image is whole
// 2 x 2 cells). The tensors the graph uses unconditionally are checked here: without them libmtmd aborts or
// dereferences null while encoding (a type name on the wrong tensors crashed it), with a patch bias or a
// class embedding it asserts.
protocol::Result<std::string> read_qwen2vl(const GgufFile& g, MmprojInfo& info) {
  auto merge = positive(g, "clip.vision.spatial_merge_size", false);
  if (!merge) return merge.error();
  if (*merge != 0 && *merge != 2)
    return bad(g.name(), "spatial_merge_size " + std::to_string(*merge) + ": libmtmd's " +
                             info.projector_name + " merges 2 x 2 patches only");
  info.scale_factor = 2;
  if (info.projector_name == "qwen2.5vl_merger") {
    auto pattern = positive(g, "clip.vision.n_wa_pattern", true);  // clip.cpp requires it for 2.5
    if (!pattern) return pattern.error();
  }
  for (const char* t : {"v.patch_embd.bias", "v.class_embd"})
    if (g.tensor(t))
      return bad(g.name(),
                 std::string(t) + ": libmtmd's " + info.projector_name + " graph asserts there is none");
  auto layers = positive(g, "clip.vision.block_count", true);
  if (!layers) return layers.error();
  std::vector<std::string> needed = {"v.patch_embd.weight", "v.patch_embd.weight.1", "mm.0.weight",
                                     "mm.0.bias", "mm.2.bias"};
  for (uint32_t i = 0; i < *layers; ++i)
    for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_out"})
      for (const char* kind : {".weight", ".bias"})
        needed.push_back("v.blk." + std::to_string(i) + "." + m + kind);
  for (const std::string& t : needed)
    if (!g.tensor(t))
      return bad(g.name(), "missing " + t + ", which " + info.projector_name + "'s tower uses");
  return std::string("mm.2.weight");
}

// MiniCPM-V: clip.minicpmv_version (absent: 2) picks the markers, clip.minicpmv_query_num (absent: 64 for
// version 3 and later, else 96) the rows of every chunk. Files with pinpoints take another path in libmtmd.
protocol::Result<std::string> read_minicpmv(const GgufFile& g, MmprojInfo& info) {
  const GgufValue* v = g.find("clip.minicpmv_version");
  const int64_t version = v ? v->i : 0;
  info.minicpmv_version = version == 0 ? 2 : uint32_t(version);
  if (!(version == 0 || (version >= 2 && version <= 6) || version == 100045))
    return bad(g.name(), "clip.minicpmv_version " + std::to_string(version) +
                             " is not one libmtmd lays out (2 to 6, 100045)");
  auto query = positive(g, "clip.minicpmv_query_num", false);
  if (!query) return query.error();
  info.rows_per_image = *query ? *query : version >= 3 ? 64 : 96;
  if (g.find("clip.vision.image_grid_pinpoints"))
    return bad(g.name(), "a resampler with image_grid_pinpoints is not laid out by epd");
  for (const char* t : {"resampler.query", "resampler.kv.weight", "resampler.pos_embed_k"})
    if (!g.tensor(t)) return bad(g.name(), std::string("missing ") + t + ", which the resampler uses");
  return std::string("resampler.proj.weight");
}

// libmtmd's Whisper chunk: 3000 mel frames (30 s), halved by the encoder's strided convolution.
constexpr uint32_t kChunkFrames = 3000;

// An audio-only mmproj: Ultravox's or Qwen2-Audio's projector over a Whisper encoder (clip.cpp's
// PROJECTOR_TYPE_ULTRAVOX / QWEN2A, models/whisper-enc.cpp).
protocol::Result<MmprojInfo> read_audio(const GgufFile& g, MmprojInfo info) {
  std::string name;
  for (const char* key : {"clip.audio.projector_type", "clip.projector_type"}) {
    auto s = g.get_string(key);
    if (!s) return bad(g.name(), s.error().detail);
    if (*s) {
      name = **s;
      break;
    }
  }
  if (name.empty()) return bad(g.name(), "no clip.audio.projector_type");
  info.projector_name = name;
  auto mels = positive(g, "clip.audio.num_mel_bins", true);
  if (!mels) return mels.error();
  std::string out_tensor;
  if (name == "ultravox") {
    info.projector = Projector::ultravox;
    auto stack = positive(g, "clip.audio.projector.stack_factor", true);
    if (!stack) return stack.error();
    info.scale_factor = *stack;
    // libmtmd counts a chunk's rows as ceil(3000 / s) / 2 and its graph stacks the 1500 encoder rows into
    // ceil(1500 / s): where the two differ (s = 8, the real files' factor, among them) it aborts on every
    // clip ("Invalid number of output tokens").
    const uint32_t counted = (kChunkFrames + *stack - 1) / *stack / 2;
    const uint32_t made = (kChunkFrames / 2 + *stack - 1) / *stack;
    if (counted != made)
      return bad(g.name(), "clip.audio.projector.stack_factor " + std::to_string(*stack) +
                               ": the pinned libmtmd counts " + std::to_string(counted) +
                               " rows a chunk, its graph makes " + std::to_string(made) +
                               ", and it aborts on such a file");
    info.rows_per_audio_chunk = counted;
    out_tensor = "mm.a.mlp.2.weight";
  } else if (name == "qwen2a") {
    info.projector = Projector::qwen2a;
    info.rows_per_audio_chunk = kChunkFrames / 2 / 2;  // the convolution's stride, then the pooling
    out_tensor = "mm.a.fc.weight";
  } else {
    return bad(g.name(), "audio projector '" + name +
                             "' is not one epd lays out (ultravox: Ultravox; qwen2a: Qwen2-Audio)");
  }
  const TensorRef* out = g.tensor(out_tensor);
  if (!out || out->shape.size() != 2) return bad(g.name(), "missing the projector's " + out_tensor);
  info.embedding_width = uint32_t(out->shape[0]);
  return info;
}

}  // namespace

uint64_t audio_chunks(uint64_t samples) {
  // mtmd-audio.cpp: at least n_fft / 2 + 1 samples, 30 s of zeros and 200 reflected at the end, frames of
  // 400 samples every 160, and only whole chunks (the last partial one is padding).
  const uint64_t n = std::max<uint64_t>(samples, 201);
  const uint64_t frames = (n + 30 * 16000) / 160 + 1;
  return frames / kChunkFrames;
}

protocol::Result<MmprojInfo> read_mmproj_info(const std::string& path) {
  auto file = GgufFile::open(path);
  if (!file) return bad(path, file.error().detail);
  const GgufFile& g = *file;
  MmprojInfo info;
  info.path = path;
  auto flag = [&](const char* key) {
    const GgufValue* v = g.find(key);
    return v && v->type == GgufType::boolean && v->i != 0;
  };
  if (flag("clip.has_gen_audio_encoder")) return bad(path, "it generates audio; epd takes sound in only");
  const bool audio = flag("clip.has_audio_encoder"), vision = flag("clip.has_vision_encoder");
  if (audio && vision)
    return bad(path, "it has both a vision and an audio tower; epd serves one tower an mmproj");
  if (audio) return read_audio(g, std::move(info));
  if (!vision)
    return bad(path, "it has no vision or audio encoder (clip.has_vision_encoder, clip.has_audio_encoder)");
  std::string name;
  for (const char* key : {"clip.projector_type", "clip.vision.projector_type"}) {
    auto s = g.get_string(key);
    if (!s) return bad(path, s.error().detail);
    if (*s) {
      name = **s;
      break;
    }
  }
  if (name.empty()) return bad(path, "no clip.projector_type");
  info.projector_name = name;
  if (auto what = lacking(name))
    return bad(path, "projector '" + name + "' needs " + *what + ", which epd's runner lacks");
  if (name == "mlp")
    info.projector = Projector::mlp;
  else if (name == "idefics3")
    info.projector = Projector::idefics3;
  else if (name == "pixtral")
    info.projector = Projector::pixtral;
  else if (name == "internvl")
    info.projector = Projector::internvl;
  else if (name == "gemma3")
    info.projector = Projector::gemma3;
  else if (name == "qwen2vl_merger" || name == "qwen2.5vl_merger")
    info.projector = Projector::qwen2vl;
  else if (name == "resampler")
    info.projector = Projector::minicpmv;
  else
    return bad(path, "projector '" + name +
                         "' is not one epd lays out (mlp: LLaVA-1.5 and 1.6; idefics3: SmolVLM; pixtral: "
                         "Pixtral, Mistral-Small-3.1; internvl: InternVL 2.5 and 3; gemma3: Gemma 3; "
                         "qwen2vl_merger, qwen2.5vl_merger: Qwen2-VL, Qwen2.5-VL; resampler: MiniCPM-V)");

  auto image_size = positive(g, "clip.vision.image_size", true);
  if (!image_size) return image_size.error();
  auto patch_size = positive(g, "clip.vision.patch_size", true);
  if (!patch_size) return patch_size.error();
  info.image_size = *image_size;
  info.patch_size = *patch_size;
  if (info.image_size % info.patch_size != 0)
    return bad(path, "image_size " + std::to_string(info.image_size) + " is not a multiple of patch_size " +
                         std::to_string(info.patch_size));
  const HeaderReader header = info.projector == Projector::mlp        ? read_mlp
                              : info.projector == Projector::pixtral  ? read_pixtral
                              : info.projector == Projector::internvl ? read_internvl
                              : info.projector == Projector::gemma3   ? read_gemma3
                              : info.projector == Projector::qwen2vl  ? read_qwen2vl
                              : info.projector == Projector::minicpmv ? read_minicpmv
                                                                      : read_idefics3;
  auto out_tensor = header(g, info);
  if (!out_tensor) return out_tensor.error();
  const TensorRef* out = g.tensor(*out_tensor);
  if (!out || out->shape.size() != 2) return bad(path, "missing the projector's " + *out_tensor);
  // Gemma 3's projection and the resampler's are stored transposed (clip.cpp multiplies by the transpose).
  const bool transposed = info.projector == Projector::gemma3 || info.projector == Projector::minicpmv;
  info.embedding_width = uint32_t(out->shape[transposed ? 1 : 0]);
  return info;
}

std::vector<std::string> layout_pieces(const MmprojInfo& info) {
  std::vector<std::string> out;
  if (info.projector == Projector::idefics3) {
    out = {"<fake_token_around_image>", "<global-img>", "\n", "\n\n"};
    const uint32_t tiles = (info.longest_edge + info.image_size - 1) / info.image_size;
    for (uint32_t y = 1; y <= tiles; ++y)
      for (uint32_t x = 1; x <= tiles; ++x)
        out.push_back("<row_" + std::to_string(y) + "_col_" + std::to_string(x) + ">");
  } else if (info.projector == Projector::pixtral) {
    out = {"[IMG_END]"};
  } else if (info.projector == Projector::internvl) {
    out = {"<img>", "</img>"};
  } else if (info.projector == Projector::gemma3) {
    out = {"<start_of_image>", "<end_of_image>"};
  } else if (info.projector == Projector::qwen2vl) {
    out = {"<|vision_start|>", "<|vision_end|>"};
  } else if (info.projector == Projector::qwen2a) {
    out = {"<|audio_bos|>", "<|audio_eos|>"};
  } else if (info.projector == Projector::minicpmv) {
    out = {"<image>", "</image>", "<slice>", "</slice>", "\n"};
  }
  return out;
}

protocol::Status check_mmproj_pair(const MmprojInfo& info, const ModelConfig& lm) {
  if (info.embedding_width != lm.d_model)
    return bad(info.path, "its projector writes rows of " + std::to_string(info.embedding_width) +
                              " values, the language model " + lm.name + " embeds " +
                              std::to_string(lm.d_model) + ": not a matching pair");
  // libmtmd gives an image (t, y, x) positions when the language model rotates by M-RoPE, whatever the
  // projector: only Qwen2-VL's rows are meant for them (another's would be a 1 x n grid).
  if (info.projector == Projector::qwen2vl && !lm.mrope)
    return bad(info.path, "projector '" + info.projector_name +
                              "' places its rows by M-RoPE, the language model " + lm.name +
                              " does not rotate by M-RoPE (a qwen2vl checkpoint does): not a matching pair");
  if (info.projector != Projector::qwen2vl && lm.mrope)
    return bad(info.path,
               "the language model " + lm.name + " rotates by M-RoPE, projector '" + info.projector_name +
                   "' lays out no 2-D image positions for it (Qwen2-VL's does): not a matching pair");
  return {};
}

namespace {

protocol::Error too_thin(const MmprojInfo& info, MediaDims dims, const std::string& what) {
  return protocol::make_error(protocol::ErrorCode::invalid_request,
                              "image of " + std::to_string(dims.width) + "x" + std::to_string(dims.height) +
                                  " is too long and thin for " + info.projector_name + "'s " + what +
                                  " (a side scales to 0)");
}

// LLaVA-1.6 and InternVL (mtmd-image.cpp's llava_uhd preprocessor with pinpoints): an image within one
// tile is the overview alone; else the pinpoint that keeps the most of its pixels when it is scaled into it
// (the least waste on a tie, the first on a tie of both; float arithmetic as libmtmd's), cut into tiles
// row by row, then the overview. Each is one chunk of rows_per_image rows, with no markers.
protocol::Result<std::vector<LayoutItem>> tile_runs(const MmprojInfo& info, MediaDims dims) {
  const int tile = int(info.image_size), ow = int(dims.width), oh = int(dims.height);
  if (ow <= tile && oh <= tile) return std::vector<LayoutItem>{{"", info.rows_per_image}};
  MediaDims best{0, 0};
  int max_effective = 0, min_wasted = std::numeric_limits<int>::max();
  for (const MediaDims& c : info.pinpoints) {
    const float scale = std::min(float(c.width) / float(ow), float(c.height) / float(oh));
    const int tw = int(float(ow) * scale), th = int(float(oh) * scale);
    const int effective = std::min(tw * th, ow * oh), wasted = int(c.width * c.height) - effective;
    if (effective > max_effective || (effective == max_effective && wasted < min_wasted)) {
      max_effective = effective;
      min_wasted = wasted;
      best = c;
    }
  }
  // No pinpoint keeps a pixel: libmtmd would tile from an unset size.
  if (max_effective == 0) return too_thin(info, dims, "pinpoints");
  const uint32_t tiles = (best.width / info.image_size) * (best.height / info.image_size);
  return std::vector<LayoutItem>(tiles + 1, LayoutItem{"", info.rows_per_image});
}

// The dynamic-size preprocessor (mtmd-image.cpp's mtmd_image_preprocessor_dyn_size): the image resized,
// keeping its aspect, to whole cells of patch_size x merge pixels and between min_cells and max_cells cells
// (clip.cpp's set_limit_image_tokens; calc_size_preserved_ratio, in its float arithmetic so that every size
// rounds as libmtmd rounds it). Returns (columns, rows) of cells.
struct Cells {
  uint32_t cols = 0, rows = 0;
};
Cells dyn_size_cells(const MmprojInfo& info, MediaDims dims, int64_t min_cells, int64_t max_cells) {
  const int align = int(info.patch_size * info.scale_factor);
  const int64_t min_pixels = min_cells * align * align, max_pixels = max_cells * align * align;
  const int width = int(dims.width), height = int(dims.height);
  const float a = float(align);
  const auto nearest = [&](float x) { return int(std::round(x / a)) * align; };
  const auto down = [&](float x) { return int(std::floor(x / a)) * align; };
  const auto up = [&](float x) { return int(std::ceil(x / a)) * align; };
  int w = std::max(align, nearest(float(width))), h = std::max(align, nearest(float(height)));
  if (int64_t{w} * h > max_pixels) {
    const float beta = std::sqrt(float(height) * float(width) / float(max_pixels));
    h = std::max(align, down(float(height) / beta));
    w = std::max(align, down(float(width) / beta));
  } else if (int64_t{w} * h < min_pixels) {
    const float beta = std::sqrt(float(min_pixels) / (float(height) * float(width)));
    h = up(float(height) * beta);
    w = up(float(width) * beta);
  }
  return {uint32_t(w / align), uint32_t(h / align)};
}

// MiniCPM-V's slices (mtmd-image.cpp's llava_uhd preprocessor without pinpoints): an image with a side past
// the slice size is cut into the grid of 2 to 9 slices, from the slice counts next to its area in slices,
// whose log aspect is closest to the image's (the first such grid on a tie), in libmtmd's float arithmetic.
Cells minicpmv_grid(const MediaDims& dims, uint32_t slice) {
  const float log_ratio = std::log(float(dims.width) / float(dims.height));
  const float ratio = float(dims.width) * float(dims.height) / float(slice * slice);
  const int multiple = int(std::fmin(std::ceil(ratio), 9.0f));
  Cells best{1, 1};
  float min_error = std::numeric_limits<float>::infinity();
  for (int n : {multiple - 1, multiple, multiple + 1}) {
    if (n == 1 || n > 9) continue;
    for (int cols = 1; cols <= n; ++cols) {
      if (n % cols) continue;
      const float error = std::abs(log_ratio - std::log(double(cols) / double(n / cols)));
      if (error < min_error) {
        min_error = error;
        best = {uint32_t(cols), uint32_t(n / cols)};
      }
    }
  }
  return best;
}

// The overview between <image> and </image>; then, for a larger image, the slices row by row, each between
// <slice> and </slice> (2.6), or each between <image> and </image> and all of them between <slice> and
// </slice> (2.5), "\n" between rows of slices.
std::vector<LayoutItem> minicpmv_layout(const MmprojInfo& info, MediaDims dims) {
  const uint32_t q = info.rows_per_image;
  std::vector<LayoutItem> out = {{"<image>", 0}, {"", q}, {"</image>", 0}};
  if (dims.width <= info.image_size && dims.height <= info.image_size) return out;
  const auto [cols, rows] = minicpmv_grid(dims, info.image_size);
  const bool v25 = info.minicpmv_version == 2;
  if (v25) out.push_back({"<slice>", 0});
  for (uint32_t y = 0; y < rows; ++y) {
    for (uint32_t x = 0; x < cols; ++x) {
      out.push_back({v25 ? "<image>" : "<slice>", 0});
      out.push_back({"", q});
      out.push_back({v25 ? "</image>" : "</slice>", 0});
    }
    if (y + 1 != rows) out.push_back({"\n", 0});
  }
  if (v25) out.push_back({"</slice>", 0});
  return out;
}

// Pixtral's image: 8 to 1024 cells (clip.cpp's set_limit_image_tokens(8, 1024)); the tower's rows are the
// cells row by row, an [IMG_BREAK] row after each row of cells but the last; then [IMG_END].
std::vector<LayoutItem> pixtral_layout(const MmprojInfo& info, MediaDims dims) {
  const auto [cols, rows] = dyn_size_cells(info, dims, 8, 1024);
  if (!info.row_breaks) return {{"", cols * rows}, {"[IMG_END]", 0}};
  return {{"", cols * rows + rows - 1, cols}, {"[IMG_END]", 0}};
}

}  // namespace

protocol::Result<std::vector<LayoutItem>> media_layout(const MmprojInfo& info, MediaDims dims) {
  std::vector<LayoutItem> out;
  if (dims.audio() != info.audio())
    return protocol::make_error(protocol::ErrorCode::invalid_request,
                                std::string("the model's mmproj takes ") +
                                    (info.audio() ? "audio" : "images") + ", not " +
                                    (dims.audio() ? "audio" : "images"));
  if (dims.audio()) {  // each 30 s chunk a run of rows (mtmd.cpp), Qwen2-Audio's between its markers
    const uint64_t chunks = audio_chunks(dims.samples);
    if (chunks * info.rows_per_audio_chunk > std::numeric_limits<uint32_t>::max())
      return protocol::make_error(protocol::ErrorCode::invalid_request,
                                  "audio of " + std::to_string(dims.samples) + " samples is too long");
    if (info.projector == Projector::qwen2a) out.push_back({"<|audio_bos|>", 0});
    out.insert(out.end(), chunks, LayoutItem{"", info.rows_per_audio_chunk});
    if (info.projector == Projector::qwen2a) out.push_back({"<|audio_eos|>", 0});
    return out;
  }
  if (dims.width == 0 || dims.height == 0)
    return protocol::make_error(protocol::ErrorCode::invalid_request, "image has no pixels");
  if (dims.width > kMaxImageSide || dims.height > kMaxImageSide)  // as every decoder refuses it
    return protocol::make_error(protocol::ErrorCode::invalid_request,
                                "image of " + std::to_string(dims.width) + "x" + std::to_string(dims.height) +
                                    " has a side past " + std::to_string(kMaxImageSide) + " pixels");
  if (info.projector == Projector::mlp) {
    if (!info.pinpoints.empty()) return tile_runs(info, dims);
    out.push_back({"", info.rows_per_image});
    return out;
  }
  if (info.projector == Projector::pixtral) return pixtral_layout(info, dims);
  if (info.projector == Projector::minicpmv) return minicpmv_layout(info, dims);
  if (info.projector == Projector::qwen2vl) {
    // 8 to 4096 cells of 2 x 2 patches (clip.cpp: set_limit_image_tokens(8, 4096) for QWEN2VL / QWEN25VL,
    // no header keys), one row each, row by row: mtmd's nx = columns, ny = rows.
    const auto [cols, rows] = dyn_size_cells(info, dims, 8, 4096);
    return std::vector<LayoutItem>{
        {"<|vision_start|>", 0}, {"", cols * rows, 0, cols}, {"<|vision_end|>", 0}};
  }
  if (info.projector == Projector::gemma3)  // squeezed to one square, whatever its shape
    return std::vector<LayoutItem>{{"<start_of_image>", 0}, {"", info.rows_per_image}, {"<end_of_image>", 0}};
  if (info.projector == Projector::internvl) {  // <img>, the tiles and the overview, </img>
    auto runs = tile_runs(info, dims);
    if (!runs) return runs.error();
    out.push_back({"<img>", 0});
    out.insert(out.end(), runs->begin(), runs->end());
    out.push_back({"</img>", 0});
    return out;
  }
  // Idefics3: the long side scaled to longest_edge (the short side kept in proportion, made even), cut into
  // image_size tiles, row by row, then the whole image as the overview (mtmd-image.cpp, mtmd.cpp).
  const int edge = int(info.longest_edge), tile = int(info.image_size);
  const double aspect = double(dims.width) / double(dims.height);
  int w = edge, h = edge;
  if (dims.width >= dims.height) {
    h = int(edge / aspect);
    h += h % 2;
  } else {
    w = int(edge * aspect);
    w += w % 2;
  }
  if (w <= 0 || h <= 0) return too_thin(info, dims, "tiles");
  const int grid_x = (w + tile - 1) / tile, grid_y = (h + tile - 1) / tile;
  for (int y = 0; y < grid_y; ++y) {
    for (int x = 0; x < grid_x; ++x) {
      out.push_back({"<fake_token_around_image>", 0});
      out.push_back({"<row_" + std::to_string(y + 1) + "_col_" + std::to_string(x + 1) + ">", 0});
      out.push_back({"", info.rows_per_image});
    }
    if (y != grid_y - 1) out.push_back({"\n", 0});
  }
  for (const char* p : {"\n\n", "<fake_token_around_image>", "<global-img>"}) out.push_back({p, 0});
  out.push_back({"", info.rows_per_image});
  out.push_back({"<fake_token_around_image>", 0});
  return out;
}

std::string media_name(MediaDims dims) {
  if (dims.audio()) return "audio of " + audio_seconds(dims.samples);
  return "image of " + std::to_string(dims.width) + "x" + std::to_string(dims.height);
}

uint32_t layout_rows(const std::vector<LayoutItem>& layout) {
  uint32_t n = 0;
  for (const auto& item : layout) n += item.rows;
  return n;
}

ModelConfig with_mmproj(ModelConfig cfg, std::string path) {
  cfg.mmproj = std::move(path);
  // An unreadable file leaves it unset: the codec and the encoder refuse that file at start.
  auto info = cfg.mmproj.empty() ? protocol::Result<MmprojInfo>(MmprojInfo{}) : read_mmproj_info(cfg.mmproj);
  cfg.bidirectional_images = info && info->bidirectional;
  if (!cfg.mmproj.empty()) cfg.max_image_patches = std::min(cfg.max_seq, 4096u);
  return cfg;
}

std::optional<TokenId> image_token(const ModelConfig& cfg) {
  if (cfg.checkpoint.empty()) return kImage;
  if (!cfg.mmproj.empty()) return cfg.vocab;
  return std::nullopt;
}

}  // namespace epd::model
