#pragma once
// A random-weight multimodal pair as llama.cpp's libmtmd loads it: a small Llama language model GGUF and an
// "mmproj" GGUF (vision or audio tower + projector), deterministic from a seed, in one of these layouts:
//
// "mlp" (LLaVA-1.5): a CLIP ViT (patch embedding without bias, learned positions, pre-LayerNorm, quick-GELU
//   blocks, no post-LayerNorm, NO class embedding: this llama.cpp appends CLS after the patches while its
//   positions assume it first, so the file has none and the graph then uses every position as a patch) and
//   the projector mm.0 (vision width -> out) + GELU + mm.2 (out -> out). No image_grid_pinpoints and no
//   clip.vision.feature_layer: llama.cpp runs the first vision_layers-1 blocks (LLaVA's second-to-last
//   layer; the last block is in the file but unused). An image of any size is resized to
//   image_size x image_size (default 112, patch 14): (image_size/patch_size)^2 = 64 rows, no marker tokens.
//   With `pinpoints` (LLaVA-1.6's clip.vision.image_grid_pinpoints, int32 width/height pairs, whole tiles of
//   image_size): an image larger than one tile is scaled into the pinpoint that keeps most of its pixels,
//   cut into its tiles (row by row, each a chunk of 64 rows), then the overview (another 64); an image
//   within one tile is the overview alone. No markers, no image_newline (libmtmd uses none).
//
// "idefics3" (SmolVLM): a SigLIP-like ViT (patch embedding with bias, learned positions, no pre-LayerNorm,
//   GELU blocks, post-LayerNorm), pixel shuffle by clip.vision.projector.scale_factor s, then
//   mm.model.fc.weight (no bias). One tile is image_size x image_size (default 32, patch 8, s = 2):
//   (image_size/patch_size)^2 / s^2 = 4 rows a tile. clip.vision.preproc_image_size L (default
//   2 x image_size = 64) is the longest edge an image is resized to: for W >= H the resized image is
//   L x h with h = int(L / (W/H)) rounded up to even, else w x L likewise; the grid is
//   ceil(width/image_size) columns x ceil(height/image_size) rows of tiles, plus one overview (the whole
//   image at image_size). So with the defaults: a square image -> 2 x 2 tiles + overview = 5 chunks, 20
//   rows; 2:1 landscape -> 2 x 1 + overview = 3 chunks, 12 rows; 1:2 portrait -> 1 x 2 + overview. A grid
//   of 1 x 1 still gives a tile plus the overview. mtmd's token layout (libmtmd, ov_img_first = false):
//     for each row y = 1..R: for each column x = 1..C: "<fake_token_around_image><row_y_col_x>" (text
//       tokenized with specials parsed: two control tokens), the tile's rows;
//       "\n" after every row but the last;
//     then "\n\n" "<fake_token_around_image>" "<global-img>", the overview's rows,
//     "<fake_token_around_image>".
//   That is (C R + 1) chunks of rows and 2 C R + (R - 1) + 4 marker tokens.
//
// "pixtral" (Pixtral-12B; with spatial_merge 2, Mistral-Small-3.1): a ViT with 2-D RoPE and no learned
//   positions (patch embedding without bias, RMSNorm pre-norm and blocks, no biases, gated SiLU FFN), with
//   spatial_merge > 1 an RMSNorm (mm.input_norm) and the patch merger (mm.patch_merger: merge x merge
//   neighbours' features -> one row), then mm.1 (vision width -> out) + GELU + mm.2 (out -> out) with biases,
//   and v.token_embd.img_break, the [IMG_BREAK] row. image_size 1024 / patch 16 without merge, 1540 / 14
//   with (the real files' numbers; the image size only names the largest side the real model was trained
//   on). An image is resized, keeping its aspect, to whole cells of patch x merge pixels, 8 to 1024 cells
//   (mmproj.cpp says how it rounds); its one chunk is the cells row by row with an [IMG_BREAK] row after each
//   row but the last, then the "[IMG_END]" token.
//
// "internvl" (InternVL 2.5 / 3): InternViT (patch embedding with bias, a class embedding appended after
//   the patches, learned positions, LayerNorm blocks with biases and layer scales, GELU), pixel shuffle by
//   scale_factor, then mm.model.mlp.0 (LayerNorm) -> .1 -> GELU -> .3. image_size 56 / patch 14 / s = 2:
//   4 rows a tile. Candidate grids are every a x b tiles with 1 <= a b <= max_tiles (clip.vision.
//   preproc_max_tiles, default 6 here); an image is laid out as LLaVA-1.6's (the grid keeping the most
//   pixels, its tiles, the overview), between "<img>" and "</img>" (control tokens of the LM).
//
// "gemma3" (Gemma 3): idefics3's SigLIP tower, its patches average-pooled scale_factor x scale_factor
//   (clip.vision.projector.scale_factor, default 4 here as in the real files), an RMSNorm
//   (mm.soft_emb_norm) and mm.input_projection (stored transposed: ggml ne {out, vision width}). image_size
//   128 / patch 8: 16 x 16 patches pooled to 4 x 4 = 16 rows, between "<start_of_image>" and
//   "<end_of_image>"; the rows of one image attend to each other both ways. Its LM is a "gemma3" checkpoint
//   (sliding window 16 on layer 0, layer 1 global: else the answer could not read an image 16 rows back).
//
// "qwen2vl" (Qwen2-VL; "qwen2.5vl": Qwen2.5-VL): a ViT with 2-D M-RoPE and no learned positions: the
//   Conv3D patch embedding split as the converter splits it into v.patch_embd.weight and .weight.1 (its two
//   temporal slices; a still image meets both, no bias), no pre-norm, LayerNorm blocks with biases
//   everywhere and quick-GELU (2.5: RMSNorm blocks, gated SiLU FFN with biases, window attention on blocks
//   0 and 2 by clip.vision.n_wa_pattern 2), the merger's norm as v.post_ln, then 2 x 2 neighbouring
//   patches' features -> mm.0 (4 d -> 4 d) + GELU -> mm.2 (4 d -> out), with biases. image_size 112 /
//   patch 14 (the header's image size does not shape the layout). An image is resized as Pixtral's to whole
//   cells of 2 patches (28 pixels), 8 to 4096 cells (mmproj.cpp says how it rounds), one row a cell, row by
//   row, between "<|vision_start|>" and "<|vision_end|>" (control tokens of the LM): 48 x 48 -> 3 x 3 = 9
//   rows, 200 x 100 -> 7 x 4 = 28. Its LM is a "qwen2vl" checkpoint (qwen2's Q/K/V biases, rotation in
//   halves, rope.dimension_sections a quarter, 3/8 and 3/8 of a head's pairs: 2, 3, 3, 0 of 8), whose image
//   rows llama.cpp places at (t, y, x) = the image's first position plus (0, row, column).
//
// "minicpmv" (MiniCPM-V 2.6 / MiniCPM-o 2.6; clip.projector_type "resampler", clip.minicpmv_version 3,
//   clip.minicpmv_query_num Q, default 64 as the real files): idefics3's SigLIP tower (patch embedding with
//   bias, no pre-LayerNorm, GELU blocks, v.post_ln) whose learned positions are 70 x 70 = 4900 rows as
//   SigLIP-400m's (clip.cpp buckets a patch grid of any shape into them: row floor(70 i / h) x 70 +
//   floor(70 j / w)), then the resampler: Q queries (resampler.query, ne {out, Q}) -> ln_q; the tower's rows
//   -> resampler.kv.weight (vision width -> out, no bias) -> ln_kv = V, plus a 2-D sin-cos embedding of
//   (x, y) computed in the graph = K; one attention (resampler.attn.q/k/v/out with biases, heads of 128
//   fixed: the projector width must be a multiple of 128, e.g. lm_width 128), ln_post, resampler.proj.weight
//   (out x out); resampler.pos_embed_k (ne {out, 4900}, the converter's sin-cos table) is required but
//   unused by the graph. image_size 112 (a slice) / patch 14. Layout (libmtmd's llava-uhd slicing without
//   pinpoints): an image no side of which exceeds image_size is resized to image_size x image_size, one
//   chunk "<image>" [Q rows] "</image>"; a larger one gets the overview (its aspect kept, area about
//   image_size^2 when larger, sides rounded to whole patches) then C x R slices (mmproj.cpp, get_best_grid
//   over 1 < C R <= 9 near the area ratio, by aspect), each a chunk of Q rows: "<image>" [overview]
//   "</image>", then per grid row per column "<slice>" [Q] "</slice>", "\n" between grid rows (none after
//   the last). Slices and overview are not square in general (e.g. 126 x 98 pixels). Its LM is a "qwen2"
//   checkpoint.
//
// "ultravox" (Ultravox) and "qwen2a" (Qwen2-Audio): AUDIO-only mmproj files as llama.cpp's converter writes
//   them (clip.has_audio_encoder true and no clip.has_vision_encoder key, clip.projector_type, clip.audio.*:
//   embedding_length, feed_forward_length, block_count, attention.head_count,
//   attention.layer_norm_epsilon, num_mel_bins 128 (whisper-large-v3's), projection_dim, for ultravox
//   projector.stack_factor). The tower is a Whisper encoder (whisper-enc.cpp): a.conv1d.1 (kernel 3, 128
//   mels -> width, stride 1) and a.conv1d.2 (kernel 3, stride 2), each with a bias (ggml ne {1, width})
//   and GELU, learned positions a.position_embd.weight (1500 of them: a chunk's 3000 mel frames halved),
//   LayerNorm blocks with Q, V and output biases but no K bias (the graph asserts it), GELU FFN with
//   biases, a.post_ln; conv kernels and matrices f16 as the converter forces (f32 with f16_matrices =
//   false). ultravox: the 1500 rows stacked by stack_factor s (s consecutive rows -> one of s x width,
//   zero-padded), RMSNorm mm.a.norm_pre (s x width), mm.a.mlp.1 (s x width -> 4 out), SwiGLU with the
//   halves swapped (-> 2 out), RMSNorm mm.a.norm_mid, mm.a.mlp.2 (2 out -> out), no biases. qwen2a:
//   whisper's average pool by 2 before a.post_ln, then mm.a.fc (width -> out) with its bias.
//   Rows of one chunk (clip_n_output_tokens for 3000 mel frames): ultravox floor(ceil(3000 / s) / 2)
//   while the graph makes ceil(1500 / s) rows, so s must keep both equal (libmtmd aborts "Invalid number
//   of output tokens" otherwise): s = 8 (the real files') would give 187 vs 188, so this fixture's default
//   is s = 4 -> 375 rows (1, 2, 3, 5, 6, 10, 12, 16 also pass; vision_layout refuses the others); qwen2a
//   750.
//   Chunks: libmtmd's helper decodes a file with miniaudio to mono f32 at 16 kHz (N = the file's frames F
//   when it is at 16 kHz, else floor(F x 16000 / R), plus one when R is another multiple of 16000), pads N
//   to at least 201 samples, then mtmd_audio_preprocessor_whisper pads 30 s of zeros and computes
//   floor(N / 160) + 3001 mel frames cut into whole windows of 3000 (a partial last window dropped):
//   epd::model::audio_chunks(N) = 1 + floor((floor(N / 160) + 1) / 3000) chunks, so 3 s -> 1, 29.98 s -> 1,
//   from 29.99 s (N >= 479840) -> 2, 31 s -> 2, 65 s -> 3. Every chunk is a whole 30 s window (the last
//   mostly padding) and has the same number of rows. Layout of one clip: ultravox: its chunks, no markers;
//   qwen2a: "<|audio_bos|>", its chunks, "<|audio_eos|>" (control tokens of the LM). The LM of qwen2a is a
//   "qwen2" checkpoint (Q/K/V biases). Long clips outgrow the default lm_context 1024 (two qwen2a chunks
//   are 1500 rows; llama-mtmd-cli sizes its context by it and then fails to decode): write such pairs
//   with e.g. 4096.
//
// Checked with llama.cpp v0.5.0's llama-mtmd-cli: both layouts load and generate; a pair whose
// projector_width differs from lm_width is refused ("mismatch between text model (n_embd = 64) and mmproj
// (n_embd = 96)"); "no_such_projector" is refused ("unknown projector type"); "qwen2vl_merger" (a type
// llama.cpp knows, with the mlp tensors) crashes it (SIGSEGV while encoding): epd refuses it before libmtmd,
// naming the tensor its graph needs (v.patch_embd.weight.1). Its audio (ultravox, qwen2a with clips of 3 s
// and 31 s in one prompt, -c 4096) generates the same greedy tokens as epd-mtmd-reference.
//
// The language model (CheckpointSpec, GGUF only, file lm.gguf): width lm_width, ChatML chat template, and
// this vocabulary (SentencePiece "llama" model, vocab 384): 0 <unk>, 1 <s>, 2 </s>, 3..258 byte tokens
// <0x00>..<0xFF> ("\n" is <0x0A> = id 13: mtmd finds "\n" by comparing token_to_piece(id, special=true), the
// first id whose piece is exactly "\n"), 259 <|im_start|>, 260 <|im_end|> (control), 261
// <fake_token_around_image>, 262 <global-img>, 263 + 6(Y-1) + (X-1) <row_Y_col_X> for Y, X in 1..6 (control,
// 263..298), for pixtral 299 [IMG_END], for internvl 299 <img> and 300 </img>, for gemma3 299
// <start_of_image> and 300 <end_of_image>, for qwen2vl 299 <|vision_start|> and 300 <|vision_end|>,
// for qwen2a 299 <|audio_bos|> and 300 <|audio_eos|>, for minicpmv 299 <image>, 300 </image>, 301 <slice>
// and 302 </slice> (control), then "\n\n" (a normal piece), then word
// pieces "▁w<id>".
//
// Tensor types: norms, biases, patch and position embeddings f32; the blocks' and projector's matrices f16
// (f32 with f16_matrices = false). Weights are uniform with fan-in scaling (activations of order 1).
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "epd/protocol/result.hpp"

namespace epd::model::testing {

struct VisionSpec {
  // "mlp" (LLaVA) | "idefics3" (SmolVLM) | "pixtral" | "internvl" | "gemma3" | "qwen2vl" | "qwen2.5vl"
  // | "minicpmv" (MiniCPM-V 2.6; needs lm_width a multiple of 128)
  // | audio: "ultravox" | "qwen2a" (Qwen2-Audio); any
  // other string is written as is as clip.projector_type, with the mlp layout's tensors (for tests of
  // refusal: "qwen2vl_merger" without Qwen2-VL's tensors, "qwen3vl_merger", "no_such_projector").
  std::string projector = "mlp";
  uint32_t lm_width = 64;            // the LM's d_model
  uint32_t projector_width = 0;      // the mmproj's output width; 0 = lm_width (else a mismatched pair)
  std::string lm_file_type = "f32";  // as CheckpointSpec::gguf_file_type
  uint64_t seed = 11;                // the mmproj's weights; the LM's are from seed + 1
  uint32_t lm_layers = 2;
  uint32_t lm_heads = 4;
  uint32_t lm_kv_heads = 2;
  uint32_t lm_context = 1024;
  // The vision tower (for ultravox and qwen2a the Whisper encoder's shape). 0 = the layout's default
  // (image_size: mlp 112, idefics3 32; patch_size: mlp 14, idefics3 8; preproc_image_size: 2 x image_size).
  uint32_t vision_width = 32;
  uint32_t vision_heads = 2;
  uint32_t vision_ffn = 80;  // must differ from vision_width (llama.cpp swaps up/down of old files if equal)
  uint32_t vision_layers = 3;
  uint32_t image_size = 0;
  uint32_t patch_size = 0;
  uint32_t scale_factor = 2;        // idefics3 and internvl (gemma3: its pooling, 0 = 4)
  uint32_t preproc_image_size = 0;  // idefics3 only
  uint32_t spatial_merge = 1;       // pixtral only: 2 = Mistral-Small-3.1's patch merger
  std::vector<int32_t> pinpoints;   // mlp only: LLaVA-1.6's (width, height) pairs; empty: LLaVA-1.5
  uint32_t max_tiles = 6;           // internvl only: clip.vision.preproc_max_tiles
  uint32_t stack_factor = 4;        // ultravox only: clip.audio.projector.stack_factor (see above)
  uint32_t query_num = 0;           // minicpmv only: clip.minicpmv_query_num; 0 = 64 (96 for version 2)
  uint32_t minicpmv_version = 3;    // minicpmv only: 2 = MiniCPM-Llama3-V 2.5's markers, 3 = 2.6's
  bool f16_matrices = true;
};

// The numbers of a spec with defaults resolved.
struct VisionLayout {
  uint32_t image_size = 0;  // mlp: the image; idefics3: a tile; pixtral: the header's (no effect)
  uint32_t patch_size = 0;
  uint32_t scale_factor = 1;        // 1 for mlp; pixtral: the spatial merge
  uint32_t preproc_image_size = 0;  // 0 for mlp
  // mlp: an image's rows; idefics3: a tile's (and the overview's); ultravox, qwen2a: a 30 s audio chunk's;
  // pixtral, qwen2vl 0
  uint32_t rows_per_chunk = 0;
  uint32_t output_width = 0;  // the projector's output width
  bool slices = false;        // minicpmv: llava-uhd slices, rows_per_chunk = query_num
  bool audio = false;         // ultravox, qwen2a (image_size and patch_size 0; scale_factor: the stack
                              // factor, qwen2a's pool 2)
};
protocol::Result<VisionLayout> vision_layout(const VisionSpec& spec);

// A 16-bit PCM RIFF WAV of round(seconds x sample_rate) frames: a few tones and a little noise, different in
// each channel, deterministic from the seed.
std::vector<uint8_t> make_test_wav(uint32_t sample_rate, uint32_t channels, double seconds, uint64_t seed);

struct VisionModelPaths {
  std::string lm;      // dir/lm.gguf
  std::string mmproj;  // dir/mmproj.gguf
};

protocol::Result<VisionModelPaths> write_vision_model(const VisionSpec& spec,
                                                      const std::filesystem::path& dir);

}  // namespace epd::model::testing
