#pragma once
// Helpers of the OpenAI API tests: running commands (node, curl, epd-run, epd-bench) and reading their
// output, reference tokens from epd-run, and checking raw SSE framing.
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace epd::testing {

struct CommandResult {
  int exit_code = -1;  // -1: it did not exit normally
  std::string output;  // stdout and stderr, interleaved
};

// Runs `argv` (no shell) and collects its output.
CommandResult run_command(const std::vector<std::string>& argv);

// Where the SDK tests live, and why they cannot run ("" = they can): node missing, or the npm packages
// not installed. The message says to run scripts/setup-deps.
std::string node_sdk_dir();
std::string node_sdk_missing();

// llama.cpp's greedy continuation (n tokens) of the token ids `prompt` on the GGUF file `gguf`
// (tests/http/node/llama_oracle.mjs: node-llama-cpp, F32 KV cache); `work_dir` takes its spec file.
// Fails the running test if the oracle cannot run.
std::vector<uint32_t> llama_cpp_greedy(const std::string& gguf, const std::string& work_dir,
                                       const std::vector<uint32_t>& prompt, int n);

// The same, with how clear each choice was: its logit's lead over the runner-up, and the largest |logit|.
struct OracleGreedy {
  std::vector<uint32_t> tokens;
  std::vector<double> lead, largest;
};
OracleGreedy llama_cpp_greedy_with_leads(const std::string& gguf, const std::string& work_dir,
                                         const std::vector<uint32_t>& prompt, int n);

struct Sampling {
  double temperature = 0;
  std::optional<double> top_p;
  std::optional<int> top_k;
  std::optional<double> min_p;
  std::map<uint32_t, double> logit_bias;
  std::optional<double> presence_penalty;
  std::optional<double> frequency_penalty;
  std::optional<double> repetition_penalty;
  std::optional<uint64_t> seed;
  // Not a sampling field of the request (each endpoint spells it its own way): epd-run --logprobs N.
  std::optional<int> logprobs;
};

struct Reference {
  std::vector<int> tokens;  // generated
  int prompt_tokens = 0;    // BOS, image placeholders and text
  nlohmann::json logprobs;  // with Sampling::logprobs: per token {"logprob": x, "top": [[id, x], ...]}
};

// Runs epd-run with `argv` (its path first, --json among the flags) and returns the object it printed (the
// line with "tokens"; the rest of the output is log lines). Throws with the output if it fails.
nlohmann::json epd_run_json(const std::vector<std::string>& argv);

// What the colocated runner (epd-run, tiny preset) generates; throws if it fails.
Reference reference(const std::string& prompt, int max_tokens, const std::string& image = "",
                    const Sampling& sampling = {});

// The sampling fields of an OpenAI request body.
nlohmann::json sampling_body(const Sampling& s);

// A raw SSE body split into events (the text between "\n\n" separators); `error` says what breaks the
// framing (a line other than `data: ...`, a missing final blank line), "" if none.
struct SseEvents {
  std::vector<std::string> data;  // each event's data, "data: " removed
  std::string error;
};
SseEvents split_sse(const std::string& body);

}  // namespace epd::testing
