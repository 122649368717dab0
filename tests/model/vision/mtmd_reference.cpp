// epd-mtmd-reference: llama.cpp itself (libllama + libmtmd) running one multimodal prompt, the oracle of
// epd's vision and audio pipelines. Tokenizes the templated prompt with mtmd (one <__media__> marker per
// image or audio clip), evaluates its chunks, decodes greedily and prints one JSON object on stdout;
// llama.cpp's warnings and errors go to stderr.
//
//   epd-mtmd-reference --model LM.gguf --mmproj MMPROJ.gguf [--image FILE | --audio FILE]... --prompt TEXT
//                      [-n N] [--threads T] [--embeddings OUT.bin] [--kv-type f16|f32] [--layout-only]
//
// --image and --audio make one list of media in command-line order, the order of the prompt's markers.
// libmtmd's helper tells them apart by their bytes (a WAV, MP3 or FLAC file is audio, decoded to 16 kHz
// mono; anything else an image): the flag only asserts which it must be.
//
// --layout-only: mtmd_tokenize's layout alone (no context, nothing encoded or decoded): the "layout" of the
// output, for images too large to encode in a test.
//
// --kv-type f16 (the default) runs llama.cpp as a user does: F16 KV cache, flash attention as it picks it
// (on a CPU it rounds each query to f16 too). f32 is the oracle's: F32 KV cache, no flash attention, so
// that attention differs from epd's f32 KV by the order of f32 sums only, not by a half-precision rounding
// of Q, K and V, which can turn a near tie between two tokens in a random model's greedy answer.
//
// Output: {"layout": [{"type":"text","tokens":[ids]} | {"type":"image","tokens":N,"id":SHA-256 of the image
// file, with an M-RoPE language model "nx","ny": its grid of positions} | {"type":"audio","tokens":N,"id":
// SHA-256 of the audio file} (one per 30 s chunk of a clip)...], "n_past": the prompt's positions,
// "generated": [ids] (greedy, stops before an end-of-generation token), "encode_us": [per image or audio
// chunk], "ttft_us": from the prompt's first chunk to the first token}.
// --embeddings writes every image and audio chunk's encoder output in chunk order: int32 n_rows, int32
// n_embd, then float32[n_rows][n_embd].
//
// One repair, the same epd's encoder makes: libmtmd's Pixtral graph makes each [IMG_BREAK] row by scaling
// scratch memory it never initialised by 0 and adding the file's v.token_embd.img_break, which gives that
// tensor exactly unless the scratch held a NaN or an infinity; an image row that is not finite is set to
// the tensor (and the run fails if the mmproj has none).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <ggml-backend.h>
#include <gguf.h>
#include <llama-cpp.h>
#include <mtmd-helper.h>
#include <mtmd.h>
#include <nlohmann/json.hpp>

namespace {

struct Args {
  std::string model, mmproj, prompt, embeddings;
  struct Media {
    std::string path;
    bool audio = false;  // --audio (else --image)
  };
  std::vector<Media> media;  // in command-line order
  int n_predict = 16;
  int threads = 2;
  bool f32_kv = false;
  bool layout_only = false;
};

[[noreturn]] void fail(const std::string& message) {
  throw std::runtime_error(message);
}

std::string existing_file(const std::string& path) {
  if (!std::filesystem::is_regular_file(path)) fail("no such file: " + path);
  return path;
}

int to_int(const std::string& flag, const std::string& value) {
  size_t used = 0;
  int n = -1;
  try {
    n = std::stoi(value, &used);
  } catch (const std::exception&) {
  }
  if (used != value.size() || n < 0) fail(flag + " takes a non-negative integer, not '" + value + "'");
  return n;
}

Args parse_args(int argc, char** argv) {
  Args args;
  bool has_prompt = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--layout-only") {
      args.layout_only = true;
      continue;
    }
    if (i + 1 >= argc) fail("missing value after " + flag);
    const std::string value = argv[++i];
    if (flag == "--model")
      args.model = existing_file(value);
    else if (flag == "--mmproj")
      args.mmproj = existing_file(value);
    else if (flag == "--image" || flag == "--audio")
      args.media.push_back({existing_file(value), flag == "--audio"});
    else if (flag == "--prompt")
      args.prompt = value, has_prompt = true;
    else if (flag == "-n")
      args.n_predict = to_int(flag, value);
    else if (flag == "--threads")
      args.threads = to_int(flag, value);
    else if (flag == "--embeddings")
      args.embeddings = value;
    else if (flag == "--kv-type" && (value == "f16" || value == "f32"))
      args.f32_kv = value == "f32";
    else
      fail("unknown argument: " + flag);
  }
  if (args.model.empty() || args.mmproj.empty() || !has_prompt)
    fail("--model, --mmproj and --prompt are required");
  if (args.threads < 1) fail("--threads must be at least 1");
  return args;
}

// llama.cpp's warnings and errors to stderr, its info and debug chatter dropped.
void log_to_stderr(ggml_log_level level, const char* text, void*) {
  static ggml_log_level last = GGML_LOG_LEVEL_NONE;
  if (level != GGML_LOG_LEVEL_CONT) last = level;
  if (last >= GGML_LOG_LEVEL_WARN) std::fputs(text, stderr);
}

size_t count_markers(const std::string& prompt) {
  const std::string marker = mtmd_default_marker();
  size_t n = 0;
  for (size_t at = prompt.find(marker); at != std::string::npos; at = prompt.find(marker, at + marker.size()))
    ++n;
  return n;
}

// The mmproj's [IMG_BREAK] row (v.token_embd.img_break, f32), or empty when it has none.
std::vector<float> break_row(const std::string& mmproj) {
  ggml_context* data = nullptr;
  gguf_context* file = gguf_init_from_file(mmproj.c_str(), {/*no_alloc=*/false, &data});
  if (!file) fail("cannot read " + mmproj);
  std::vector<float> row;
  if (ggml_tensor* t = ggml_get_tensor(data, "v.token_embd.img_break"); t && t->type == GGML_TYPE_F32) {
    const auto* v = static_cast<const float*>(t->data);
    row.assign(v, v + ggml_nelements(t));
  }
  gguf_free(file);
  ggml_free(data);
  return row;
}

// Rows of an image chunk that are not finite become the [IMG_BREAK] row (see the header).
void repair_break_rows(float* rows, size_t n_rows, const std::vector<float>& brk, int n_embd) {
  for (size_t r = 0; r < n_rows; ++r) {
    float* row = rows + r * size_t(n_embd);
    if (std::all_of(row, row + n_embd, [](float v) { return std::isfinite(v); })) continue;
    if (brk.size() != size_t(n_embd)) fail("image row " + std::to_string(r) + " is not finite");
    std::copy(brk.begin(), brk.end(), row);
  }
}

int64_t micros_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start)
      .count();
}

int run(const Args& args) {
  if (count_markers(args.prompt) != args.media.size())
    fail("the prompt has " + std::to_string(count_markers(args.prompt)) + " " + mtmd_default_marker() +
         " markers for " + std::to_string(args.media.size()) + " images and audio clips");
  llama_log_set(log_to_stderr, nullptr);
  mtmd_helper_log_set(log_to_stderr, nullptr);
  ggml_backend_load_all_from_path(EPD_GGML_DIR);  // the CPU back end is a separate libggml-cpu-<isa>.so

  llama_model_params model_params = llama_model_default_params();
  model_params.n_gpu_layers = 0;
  llama_model_ptr model(llama_model_load_from_file(args.model.c_str(), model_params));
  if (!model) fail("cannot load model " + args.model);
  const llama_vocab* vocab = llama_model_get_vocab(model.get());

  mtmd_context_params mtmd_params = mtmd_context_params_default();
  mtmd_params.use_gpu = false;
  mtmd_params.print_timings = false;
  mtmd_params.warmup = false;
  mtmd_params.n_threads = args.threads;
  mtmd::context_ptr mctx(mtmd_init_from_file(args.mmproj.c_str(), model.get(), mtmd_params));
  if (!mctx) fail("cannot load mmproj " + args.mmproj);

  std::vector<mtmd::bitmap_ptr> bitmaps;
  std::vector<const mtmd_bitmap*> bitmap_views;
  for (const Args::Media& m : args.media) {
    const char* kind = m.audio ? "audio" : "image";
    mtmd_helper_bitmap_wrapper loaded =
        mtmd_helper_bitmap_init_from_file(mctx.get(), m.path.c_str(), false, mtmd_helper_init_opt_default());
    if (!loaded.bitmap) fail(std::string("cannot decode ") + kind + " " + m.path);
    bitmaps.emplace_back(loaded.bitmap);
    bitmap_views.push_back(loaded.bitmap);
    if (mtmd_bitmap_is_audio(loaded.bitmap) != m.audio)
      fail(m.path + " is not " + (m.audio ? "audio" : "an image"));
  }

  const mtmd_input_text text{args.prompt.c_str(), args.prompt.size(), /*add_special=*/true,
                             /*parse_special=*/true};
  mtmd::input_chunks_ptr chunks(mtmd_input_chunks_init());
  const int32_t tokenized =
      mtmd_tokenize(mctx.get(), chunks.get(), &text, bitmap_views.data(), bitmap_views.size());
  if (tokenized != 0) fail("mtmd_tokenize failed (" + std::to_string(tokenized) + ")");

  const size_t n_chunks = mtmd_input_chunks_size(chunks.get());
  if (n_chunks == 0 || mtmd_input_chunk_get_type(mtmd_input_chunks_get(chunks.get(), n_chunks - 1)) !=
                           MTMD_INPUT_CHUNK_TYPE_TEXT)
    fail("the prompt must end with text after its last image or audio clip");
  nlohmann::json layout = nlohmann::json::array();
  size_t largest_chunk = 1;
  for (size_t i = 0; i < n_chunks; ++i) {
    const mtmd_input_chunk* chunk = mtmd_input_chunks_get(chunks.get(), i);
    if (mtmd_input_chunk_get_type(chunk) == MTMD_INPUT_CHUNK_TYPE_TEXT) {
      size_t n = 0;
      const llama_token* tokens = mtmd_input_chunk_get_tokens_text(chunk, &n);
      layout.push_back({{"type", "text"}, {"tokens", std::vector<llama_token>(tokens, tokens + n)}});
    } else {
      const size_t n = mtmd_input_chunk_get_n_tokens(chunk);
      const bool audio = mtmd_input_chunk_get_type(chunk) == MTMD_INPUT_CHUNK_TYPE_AUDIO;
      nlohmann::json image = {
          {"type", audio ? "audio" : "image"}, {"tokens", n}, {"id", mtmd_input_chunk_get_id(chunk)}};
      if (!audio && mtmd_decode_use_mrope(mctx.get()) && n) {
        // The grid as mtmd positions it (its nx / ny getters are deprecated): the last row's (x, y) + 1.
        const mtmd_decoder_pos last =
            mtmd_image_tokens_get_decoder_pos(mtmd_input_chunk_get_tokens_image(chunk), 0, n - 1);
        image["nx"] = last.x + 1;
        image["ny"] = last.y + 1;
      }
      layout.push_back(std::move(image));
      largest_chunk = std::max(largest_chunk, n);
    }
  }
  if (args.layout_only) {
    std::cout << nlohmann::json{{"layout", layout}}.dump() << std::endl;
    return 0;
  }

  // One batch (and micro-batch) holds a whole image or audio chunk: non-causal projectors need it in one
  // piece.
  const auto n_batch = static_cast<uint32_t>(std::max<size_t>(512, largest_chunk));
  llama_context_params ctx_params = llama_context_default_params();
  // KV cells for every row: with M-RoPE an image takes fewer positions than rows (and llama.cpp caps
  // n_batch at n_ctx, which then could not hold the image).
  ctx_params.n_ctx = static_cast<uint32_t>(mtmd_helper_get_n_tokens(chunks.get()) + args.n_predict + 16);
  ctx_params.n_batch = ctx_params.n_ubatch = n_batch;
  ctx_params.n_threads = ctx_params.n_threads_batch = args.threads;
  if (args.f32_kv) {
    ctx_params.type_k = ctx_params.type_v = GGML_TYPE_F32;
    ctx_params.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  }
  llama_context_ptr lctx(llama_init_from_model(model.get(), ctx_params));
  if (!lctx) fail("cannot create the llama context");

  // Chunk by chunk, so that each image's or audio chunk's encode is timed and its embeddings can be kept.
  const int n_embd = llama_model_n_embd_inp(model.get());
  const std::vector<float> brk = break_row(args.mmproj);
  std::vector<float> embeddings;
  std::vector<int64_t> encode_us;
  llama_pos n_past = 0;
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < n_chunks; ++i) {
    const mtmd_input_chunk* chunk = mtmd_input_chunks_get(chunks.get(), i);
    llama_pos new_n_past = n_past;
    int32_t status = 0;
    if (mtmd_input_chunk_get_type(chunk) == MTMD_INPUT_CHUNK_TYPE_TEXT) {
      status = mtmd_helper_eval_chunk_single(mctx.get(), lctx.get(), chunk, n_past, 0, n_batch,
                                             i + 1 == n_chunks, &new_n_past);
    } else {
      const auto encode_start = std::chrono::steady_clock::now();
      if (mtmd_encode_chunk(mctx.get(), chunk) != 0) fail("cannot encode media chunk " + std::to_string(i));
      encode_us.push_back(micros_since(encode_start));
      float* embd = mtmd_get_output_embd(mctx.get());
      repair_break_rows(embd, mtmd_input_chunk_get_n_tokens(chunk), brk, n_embd);
      if (!args.embeddings.empty())
        embeddings.insert(embeddings.end(), embd, embd + mtmd_input_chunk_get_n_tokens(chunk) * n_embd);
      status = mtmd_helper_decode_image_chunk(mctx.get(), lctx.get(), chunk, embd, n_past, 0, n_batch,
                                              &new_n_past, nullptr, nullptr);
    }
    if (status != 0) fail("cannot evaluate chunk " + std::to_string(i) + " (" + std::to_string(status) + ")");
    n_past = new_n_past;
  }

  // Greedy decoding: the argmax of the last logits, until -n tokens or an end-of-generation token.
  const int n_vocab = llama_vocab_n_tokens(vocab);
  std::vector<llama_token> generated;
  int64_t ttft_us = 0;
  for (int step = 0; step < args.n_predict; ++step) {
    const float* logits = llama_get_logits_ith(lctx.get(), -1);
    if (!logits) fail("no logits after decoding");
    llama_token token = static_cast<llama_token>(std::max_element(logits, logits + n_vocab) - logits);
    if (step == 0) ttft_us = micros_since(start);
    if (llama_vocab_is_eog(vocab, token)) break;
    generated.push_back(token);
    if (step + 1 == args.n_predict) break;
    llama_batch batch = llama_batch_get_one(&token, 1);
    if (llama_decode(lctx.get(), batch) != 0) fail("llama_decode failed at step " + std::to_string(step));
  }

  if (!args.embeddings.empty()) {
    std::ofstream out(args.embeddings, std::ios::binary);
    const int32_t header[2] = {static_cast<int32_t>(embeddings.size() / n_embd), n_embd};
    out.write(reinterpret_cast<const char*>(header), sizeof header);
    out.write(reinterpret_cast<const char*>(embeddings.data()),
              static_cast<std::streamsize>(embeddings.size() * sizeof(float)));
    if (!out) fail("cannot write " + args.embeddings);
  }
  const nlohmann::json result = {{"layout", layout},
                                 {"n_past", n_past},
                                 {"generated", generated},
                                 {"encode_us", encode_us},
                                 {"ttft_us", ttft_us}};
  std::cout << result.dump() << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::cerr << "epd-mtmd-reference: " << e.what() << std::endl;
    return 1;
  }
}
