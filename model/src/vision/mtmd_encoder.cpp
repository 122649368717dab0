// An mmproj run by libmtmd: the language model's vocabulary only (mtmd tokenizes with it and looks its
// markers up in it), the tower and projector from the mmproj, CPU only. epd's own layout (mmproj.hpp) is
// what the router put in the prompt; each image is checked against mtmd's before its rows are returned.
#include <ggml-backend.h>
#include <llama.h>
#include <mtmd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>

#include "epd/model/gguf.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/mmproj.hpp"
#include "epd/model/vision.hpp"

#ifndef EPD_GGML_DEFAULT_DIR
#define EPD_GGML_DEFAULT_DIR ""
#endif

namespace epd::model {
namespace {

using protocol::ErrorCode;

protocol::Error config_error(std::string what) {
  return protocol::make_error(ErrorCode::config_error, std::move(what));
}

// llama.cpp says what it loads at INFO; only its warnings and errors reach stderr.
void quiet_log(ggml_log_level level, const char* text, void*) {
  if (level >= GGML_LOG_LEVEL_WARN) std::fputs(text, stderr);
}

// ggml's CPU back ends are libraries of their own (one per instruction set, node-llama-cpp's): loaded once,
// from where epd's own glue finds them.
void load_backends() {
  static std::once_flag once;
  std::call_once(once, [] {
    llama_log_set(quiet_log, nullptr);
    mtmd_log_set(quiet_log, nullptr);
    const char* dir = std::getenv("EPD_GGML_DIR");
    ggml_backend_load_all_from_path(dir && *dir ? dir : EPD_GGML_DEFAULT_DIR);
    llama_backend_init();
  });
}

struct ModelFree {
  void operator()(llama_model* m) const { llama_model_free(m); }
};
struct MtmdFree {
  void operator()(mtmd_context* c) const { mtmd_free(c); }
};
struct BitmapFree {
  void operator()(mtmd_bitmap* b) const { mtmd_bitmap_free(b); }
};
struct ChunksFree {
  void operator()(mtmd_input_chunks* c) const { mtmd_input_chunks_free(c); }
};

class MtmdEncoder : public ImageEncoder {
 public:
  MtmdEncoder(MmprojInfo info, std::vector<float> break_row, std::unique_ptr<llama_model, ModelFree> vocab,
              std::unique_ptr<mtmd_context, MtmdFree> ctx)
      : info_(std::move(info)),
        break_row_(std::move(break_row)),
        vocab_model_(std::move(vocab)),
        ctx_(std::move(ctx)) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(info_.path, ec);
    const auto mtime = std::filesystem::last_write_time(info_.path, ec).time_since_epoch().count();
    tower_ = "mmproj " + info_.path + " " + std::to_string(size) + " " + std::to_string(mtime);
  }

  protocol::Result<Embeddings> encode(const Image& image) override {
    if (image.width == 0 || image.height == 0 || image.rgb.size() != uint64_t{image.width} * image.height * 3)
      return protocol::make_error(ErrorCode::invalid_request, "image: empty or inconsistent raster");
    std::unique_ptr<mtmd_bitmap, BitmapFree> bitmap(
        mtmd_bitmap_init(image.width, image.height, image.rgb.data()));
    return encode_bitmap(*bitmap, {image.width, image.height, 0});
  }

  protocol::Result<Embeddings> encode_audio(const Audio& audio) override {
    if (audio.samples.empty()) return protocol::make_error(ErrorCode::invalid_request, "audio: no samples");
    std::unique_ptr<mtmd_bitmap, BitmapFree> bitmap(
        mtmd_bitmap_init_from_audio(audio.samples.size(), audio.samples.data()));
    return encode_bitmap(*bitmap, {0, 0, audio.samples.size()});
  }

  std::string tower() const override { return tower_; }

 private:
  // One item through mtmd: tokenized alone, its layout checked against epd's, then every chunk of rows
  // (an image's tiles, a clip's 30 s chunks) encoded in order.
  protocol::Result<Embeddings> encode_bitmap(const mtmd_bitmap& bitmap, MediaDims dims) {
    if (dims.audio() != info_.audio())
      return protocol::make_error(ErrorCode::invalid_request,
                                  "model's mmproj takes " + std::string(info_.audio() ? "audio" : "images") +
                                      ", not " + (dims.audio() ? "audio" : "images"));
    std::unique_ptr<mtmd_input_chunks, ChunksFree> chunks(mtmd_input_chunks_init());
    const char* marker = mtmd_default_marker();
    const mtmd_input_text text{marker, std::strlen(marker), /*add_special=*/false, /*parse_special=*/true};
    const mtmd_bitmap* bitmaps[] = {&bitmap};
    if (int32_t rc = mtmd_tokenize(ctx_.get(), chunks.get(), &text, bitmaps, 1); rc != 0)
      return protocol::make_error(ErrorCode::invalid_request,
                                  media_name(dims) +
                                      ": libmtmd cannot preprocess it (mtmd_tokenize returned " +
                                      std::to_string(rc) + ")");
    auto layout = check_layout(*chunks, dims);
    if (!layout) return layout.error();
    std::vector<uint32_t> break_every;  // per chunk of rows
    for (const LayoutItem& item : *layout)
      if (item.rows) break_every.push_back(item.break_every);
    Embeddings out;
    out.dim = info_.embedding_width;
    size_t row_chunk = 0;
    for (size_t i = 0; i < mtmd_input_chunks_size(chunks.get()); ++i) {
      const mtmd_input_chunk* c = mtmd_input_chunks_get(chunks.get(), i);
      if (mtmd_input_chunk_get_type(c) == MTMD_INPUT_CHUNK_TYPE_TEXT) continue;
      const size_t n = mtmd_input_chunk_get_n_tokens(c);
      if (mtmd_encode_chunk(ctx_.get(), c) != 0)
        return protocol::make_error(ErrorCode::internal,
                                    "libmtmd failed to encode a chunk of " + media_name(dims));
      const float* rows = mtmd_get_output_embd(ctx_.get());
      const size_t first = out.data.size();
      out.data.insert(out.data.end(), rows, rows + n * out.dim);
      if (auto st = repair_break_rows(std::span(out.data).subspan(first), break_every[row_chunk++]); !st)
        return st.error();
      out.tokens += uint32_t(n);
    }
    return out;
  }

  // libmtmd's Pixtral graph makes each [IMG_BREAK] row by scaling scratch memory it never initialised by 0
  // and adding v.token_embd.img_break: that tensor exactly, unless the scratch held a NaN or an infinity
  // (it does, now and then, in a process that has encoded before). Such a row becomes the tensor: what
  // libmtmd means and gives otherwise. Any other row that is not finite is libmtmd's failure.
  protocol::Status repair_break_rows(std::span<float> rows, uint32_t break_every) const {
    const size_t dim = info_.embedding_width;
    for (size_t r = 0; r * dim < rows.size(); ++r) {
      const std::span<float> row = rows.subspan(r * dim, dim);
      if (std::all_of(row.begin(), row.end(), [](float v) { return std::isfinite(v); })) continue;
      if (break_every == 0 || r % (break_every + 1) != break_every || break_row_.size() != dim)
        return protocol::make_error(ErrorCode::internal,
                                    "libmtmd's image row " + std::to_string(r) + " is not finite");
      std::copy(break_row_.begin(), break_row_.end(), row.begin());
    }
    return {};
  }

  // mtmd's chunks against the layout the router computed: the same marker pieces and row runs, in order,
  // and a run laid out as a grid (cols != 0: its rows take 2-D positions) is mtmd's nx x ny grid.
  protocol::Result<std::vector<LayoutItem>> check_layout(const mtmd_input_chunks& chunks,
                                                         MediaDims dims) const {
    auto layout = media_layout(info_, dims);
    if (!layout) return layout.error();
    std::string want, got;
    for (const LayoutItem& item : *layout)
      want += !item.rows ? escape_text(item.piece) + " "
              : item.cols
                  ? "[" + std::to_string(item.rows) + " rows: ny " + std::to_string(item.rows / item.cols) +
                        ", nx " + std::to_string(item.cols) + "]"
                  : "[" + std::to_string(item.rows) + " rows]";
    const llama_vocab* vocab = llama_model_get_vocab(vocab_model_.get());
    for (size_t i = 0; i < mtmd_input_chunks_size(&chunks); ++i) {
      const mtmd_input_chunk* c = mtmd_input_chunks_get(&chunks, i);
      if (mtmd_input_chunk_get_type(c) != MTMD_INPUT_CHUNK_TYPE_TEXT) {
        const size_t n = mtmd_input_chunk_get_n_tokens(c);
        const mtmd_image_tokens* image = mtmd_input_chunk_get_tokens_image(c);
        if (mtmd_decode_use_mrope(ctx_.get()) && image && n)
          got += mrope_grid(image, n);
        else
          got += "[" + std::to_string(n) + " rows]";
        continue;
      }
      size_t n = 0;
      const llama_token* ids = mtmd_input_chunk_get_tokens_text(c, &n);
      for (size_t k = 0; k < n; ++k) {
        char buf[256];
        const int32_t len = llama_token_to_piece(vocab, ids[k], buf, sizeof buf, 0, true);
        got += escape_text(std::string_view(buf, len > 0 ? size_t(len) : 0)) + " ";
      }
    }
    if (want != got)
      return protocol::make_error(
          ErrorCode::internal,
          "the layout epd computed (" + want + ") is not libmtmd's (" + got + ") for " + media_name(dims));
    return layout;
  }

  // An M-RoPE image's n rows as mtmd positions them (its nx and ny getters are deprecated in favour of the
  // positions): "[n rows: ny .., nx ..]" read off its last row, and any row not at (t, y, x) = (0, i / nx,
  // i % nx), spelled out (the first few).
  static std::string mrope_grid(const mtmd_image_tokens* image, size_t n) {
    const mtmd_decoder_pos last = mtmd_image_tokens_get_decoder_pos(image, 0, n - 1);
    const size_t nx = size_t(last.x) + 1, ny = size_t(last.y) + 1;
    std::string out =
        "[" + std::to_string(n) + " rows: ny " + std::to_string(ny) + ", nx " + std::to_string(nx) + "]";
    int shown = 0;
    for (size_t i = 0; i < n && shown < 3; ++i) {
      const mtmd_decoder_pos p = mtmd_image_tokens_get_decoder_pos(image, 0, i);
      if (p.t == 0 && p.y == i / nx && p.x == i % nx) continue;
      out += "(row " + std::to_string(i) + " at t " + std::to_string(p.t) + ", y " + std::to_string(p.y) +
             ", x " + std::to_string(p.x) + ")";
      ++shown;
    }
    return out;
  }

  MmprojInfo info_;
  std::vector<float> break_row_;  // pixtral: v.token_embd.img_break
  std::string tower_;
  std::unique_ptr<llama_model, ModelFree> vocab_model_;
  std::unique_ptr<mtmd_context, MtmdFree> ctx_;
};

}  // namespace

protocol::Result<std::unique_ptr<ImageEncoder>> make_vision_encoder(const ModelConfig& cfg) {
  if (cfg.mmproj.empty()) return make_image_encoder(cfg);
  if (auto st = validate(cfg); !st) return st.error();
  auto info = read_mmproj_info(cfg.mmproj);
  if (!info) return info.error();
  if (auto st = check_mmproj_pair(*info, cfg); !st) return st.error();
  std::vector<float> break_row;
  if (info->row_breaks) {
    auto file = GgufFile::open(cfg.mmproj);
    if (!file) return file.error();
    const TensorRef* t = file->tensor("v.token_embd.img_break");
    if (!t || t->elements() != info->embedding_width)
      return config_error("mmproj " + cfg.mmproj + ": v.token_embd.img_break is not one row of " +
                          std::to_string(info->embedding_width) + " values");
    break_row.resize(t->elements());
    if (auto st = tensor_to_f32(*t, break_row); !st) return st.error();
  }
  load_backends();
  llama_model_params mp = llama_model_default_params();
  mp.vocab_only = true;
  mp.n_gpu_layers = 0;
  std::unique_ptr<llama_model, ModelFree> vocab(llama_model_load_from_file(cfg.checkpoint.c_str(), mp));
  if (!vocab) return config_error("libllama cannot read the vocabulary of " + cfg.checkpoint);
  mtmd_context_params p = mtmd_context_params_default();
  p.use_gpu = false;
  p.print_timings = false;
  p.warmup = false;
  p.n_threads = int(cfg.threads);
  std::unique_ptr<mtmd_context, MtmdFree> ctx(mtmd_init_from_file(cfg.mmproj.c_str(), vocab.get(), p));
  if (!ctx) return config_error("libmtmd cannot load the mmproj " + cfg.mmproj);
  const bool supported = info->audio() ? mtmd_support_audio(ctx.get()) && !mtmd_support_vision(ctx.get())
                                       : mtmd_support_vision(ctx.get()) && !mtmd_support_audio(ctx.get());
  if (!supported || mtmd_decode_use_mrope(ctx.get()) != cfg.mrope ||
      mtmd_decode_use_non_causal(ctx.get(), nullptr) != info->bidirectional)
    return config_error("mmproj " + cfg.mmproj + ": libmtmd runs it with what epd's runner lacks");
  return std::unique_ptr<ImageEncoder>(std::make_unique<MtmdEncoder>(std::move(*info), std::move(break_row),
                                                                     std::move(vocab), std::move(ctx)));
}

protocol::Result<std::unique_ptr<ModelRunner>> make_vision_runner(const ModelConfig& cfg) {
  if (cfg.checkpoint.empty() || cfg.mmproj.empty()) return make_runner(cfg);
  auto encoder = make_vision_encoder(cfg);
  if (!encoder) return encoder.error();
  auto r = make_llama_runner(cfg, std::move(*encoder));
  if (!r) return r.error();
  return std::unique_ptr<ModelRunner>(std::move(*r));
}

}  // namespace epd::model
