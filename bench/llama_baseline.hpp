#pragma once
// llama.cpp's own measurements of a GGUF file, the baseline `epd-bench model` prints epd's figures against:
// `llama-bench` (prompt processing; text generation at a depth) and `llama-batched-bench` (eight sequences
// generating together), built from the pinned bundle for this CPU by scripts/llama-tools (once).
#include <cstdint>
#include <optional>
#include <string>

namespace epd::bench {

struct ModelWorkload {
  uint32_t threads = 2;
  uint32_t prompt_len = 512;  // prefill: one prompt of this many tokens
  uint32_t depth = 512;       // decode: sequences already this many tokens long
  uint32_t steps = 64;        // decode steps timed
  int repeat = 3;
  int logprobs = -1;  // epd's decode steps report each token's logprobs with this many alternatives; -1: none
};

struct ModelFigures {
  double prefill_tps = 0, decode1_tps = 0, decode8_tps = 0;  // decode8: all eight sequences' tokens
};

// Runs llama.cpp's tools on `gguf` (F16 KV cache and flash attention as they default); nullopt (after
// saying why on stderr) if they cannot be built or run.
std::optional<ModelFigures> llama_cpp_figures(const std::string& gguf, const ModelWorkload& w);

// The directory of llama.cpp's programs `targets` (space-separated), built for this CPU by
// scripts/llama-tools the first time (minutes); nullopt (after saying why on stderr) if they cannot be built.
std::optional<std::string> llama_tools_dir(const std::string& targets);

// The tools' settings, for the report: "llama-bench/llama-batched-bench (llama.cpp v0.5.0, native build,
// F16 KV, flash attention auto)".
std::string llama_cpp_description();

}  // namespace epd::bench
