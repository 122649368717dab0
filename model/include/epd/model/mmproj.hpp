#pragma once
// llama.cpp's mmproj files (a vision tower and its projector, as `llama-server --mmproj` takes them) as far
// as epd reads them itself: the metadata that decides which projectors epd serves and where an image's rows
// go in a prompt. Only the header is read (no weights): the router computes a prompt's layout from it, and
// the encoder, which runs the file through libmtmd (model/src/vision), checks every image against mtmd's
// own tokenizer.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "epd/model/config.hpp"
#include "epd/model/tokens.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model {

// The projectors whose layout epd computes: LLaVA's MLP ("mlp": LLaVA-1.5's fixed-size image, or with
// image_grid_pinpoints LLaVA-1.6's tiles of the best-fitting pinpoint then the overview; no markers),
// SmolVLM's Idefics3 ("idefics3", tiles with row/column markers and an overview) and Pixtral's ("pixtral":
// Pixtral-12B and, with a patch merger, Mistral-Small-3.1; the image at about its own size, rows of patches
// each ended by an [IMG_BREAK] row but the last, then [IMG_END]).
// InternVL 2.5 / 3 ("internvl": LLaVA-1.6's tiling over every grid of min..max tiles, pixel shuffle,
// the image between <img> and </img>).
// Gemma 3 ("gemma3": the image squeezed to image_size, pooled to (image_size / patch_size / 4)^2 rows between
// <start_of_image> and <end_of_image>, which attend to each other in both directions).
// Qwen2-VL and Qwen2.5-VL ("qwen2vl_merger", "qwen2.5vl_merger": one layout): the image resized as Pixtral's
// to 8..4096 cells of 2 x 2 patches, one row a cell, row by row between <|vision_start|> and <|vision_end|>;
// the rows take 2-D positions in an M-RoPE language model (LayoutItem::cols).
// MiniCPM-V 2.5 / 2.6 / MiniCPM-o ("resampler"): every chunk is the resampler's query_num rows; an image
// within one image_size slice is the overview alone, a larger one the overview then up to 9 slices in the
// grid whose aspect is closest to the image's (llava_uhd's best grid), with <image> / <slice> markers.
// Audio (an mmproj with an audio tower, no vision one): a Whisper encoder cutting a clip into 30 s chunks of
// 3000 mel frames (audio_layout below), then Ultravox's projector ("ultravox": frames stacked by
// clip.audio.projector.stack_factor, no markers) or Qwen2-Audio's ("qwen2a": frames pooled by 2, the clip
// between <|audio_bos|> and <|audio_eos|>).
enum class Projector { mlp, idefics3, pixtral, internvl, gemma3, qwen2vl, minicpmv, ultravox, qwen2a };

struct MmprojInfo {
  std::string path;
  Projector projector = Projector::mlp;
  std::string projector_name;  // as the file spells it
  uint32_t image_size = 0;     // the tower's input side (idefics3: a tile's)
  uint32_t patch_size = 0;
  uint32_t scale_factor = 1;     // idefics3's pixel shuffle; pixtral's spatial merge (1: none); qwen2vl 2
  uint32_t longest_edge = 0;     // idefics3's clip.vision.preproc_image_size
  uint32_t embedding_width = 0;  // the projector's output: must be the language model's d_model
  uint32_t rows_per_image = 0;   // rows of one image (mlp) or of one tile (idefics3); 0 for pixtral
  bool row_breaks = false;       // pixtral: v.token_embd.img_break (an [IMG_BREAK] row after each row)
  bool bidirectional = false;    // gemma3: an image's rows attend to each other both ways
  // mlp: LLaVA-1.6's image_grid_pinpoints (width, height), or none; internvl: its tile grids in pixels
  std::vector<MediaDims> pinpoints;
  uint32_t rows_per_audio_chunk = 0;  // audio: rows of one 30 s chunk
  uint32_t minicpmv_version = 0;      // minicpmv: 2 (2.5's markers) or 3.. (2.6's)
  bool audio() const { return projector == Projector::ultravox || projector == Projector::qwen2a; }
};

// Reads and checks the header: a vision or an audio tower (not both), a projector epd serves without what it
// lacks (config_error naming it: M-RoPE projectors other than Qwen2-VL's, other non-causal ones than Gemma
// 3's, audio projectors other than Ultravox's and Qwen2-Audio's), and shapes that give whole patches (and
// pinpoints of whole tiles); for Qwen2-VL also the tensors libmtmd's graph uses unconditionally (it crashes
// without them); for Ultravox a stack factor whose rows libmtmd counts as its graph makes them (it aborts
// otherwise).
protocol::Result<MmprojInfo> read_mmproj_info(const std::string& path);

// The marker pieces the projector's layouts may use, each of which the language model must have.
std::vector<std::string> layout_pieces(const MmprojInfo& info);

// The pair must fit: the projector's width is the language model's d_model, and Qwen2-VL's projector goes
// with an M-RoPE language model (ModelConfig::mrope) and only it with one (config_error naming both).
protocol::Status check_mmproj_pair(const MmprojInfo& info, const ModelConfig& lm);

// An image's stretch of a prompt, as mtmd_tokenize lays it out: special tokens named by their exact piece
// (looked up in the vocabulary as libmtmd looks them up) and runs of image rows, in order.
struct LayoutItem {
  std::string piece;         // a token's text ("<fake_token_around_image>", "\n"); empty for a run of rows
  uint32_t rows = 0;         // image embedding rows (one chunk: the image, a tile or the overview)
  uint32_t break_every = 0;  // pixtral: after every this many rows, an [IMG_BREAK] row (but at the end)
  // Qwen2-VL's M-RoPE: the run is an image of rows / cols rows of `cols` rows each, row by row (mtmd's nx
  // and ny), whose positions are 2-D (epd/model/positions.hpp); 0: the run's positions are its slots.
  uint32_t cols = 0;
};

// The layout of one item: an image of width x height pixels, or an audio clip of `samples` samples (its
// 30 s chunks, each a run of rows_per_audio_chunk rows, between the projector's markers).
// invalid_request for an image libmtmd cannot lay out (Idefics3 and LLaVA-1.6: so long and thin that a
// side scales to 0 pixels; any: a side past kMaxImageSide), an image for an audio tower or a clip for a
// vision tower. Pixtral and Qwen2-VL take any other size: libmtmd scales it into their cell limits.
protocol::Result<std::vector<LayoutItem>> media_layout(const MmprojInfo& info, MediaDims dims);

// The 30 s chunks libmtmd's Whisper preprocessor cuts a clip of `samples` samples into: the clip padded
// with 30 s of silence (and to 201 samples at least), in mel frames of 160 samples (400-sample windows),
// whole chunks of 3000 frames only. So a clip shorter than 29.99 s is one chunk, and one of exactly 30 s
// two (the second nearly all padding).
uint64_t audio_chunks(uint64_t samples);

// "image of WxH" or "audio of N s", for errors.
std::string media_name(MediaDims dims);

// Rows of all runs of a layout.
uint32_t layout_rows(const std::vector<LayoutItem>& layout);

// cfg (a checkpoint) with `path` as its mmproj; an image may then take up to min(max_seq, 4096) rows, and
// bidirectional_images says whether its projector wants them (read from the header).
ModelConfig with_mmproj(ModelConfig cfg, std::string path);

// The placeholder id of an image row in a prompt: kImage for the reference model, the first id past the
// vocabulary for a checkpoint with an mmproj (no text token has it), none for a text-only checkpoint.
std::optional<TokenId> image_token(const ModelConfig& cfg);

}  // namespace epd::model
