#include "llama_baseline.hpp"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

namespace epd::bench {
namespace {

// stdout of a shell command, and whether it exited 0.
std::pair<std::string, bool> run(const std::string& cmd) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {"", false};
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  return {out, ::pclose(p) == 0};
}

std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The directory of llama-bench and llama-batched-bench.
std::optional<std::string> tools_dir() {
  static const std::optional<std::string> dir = llama_tools_dir("llama-bench llama-batched-bench");
  return dir;
}

// avg_ts of llama-bench's one test (-o json).
std::optional<double> llama_bench(const std::string& dir, const std::string& args) {
  auto [out, ok] = run(quoted(dir + "/llama-bench") + " " + args + " -o json 2>/dev/null");
  const auto j = nlohmann::json::parse(out, nullptr, false);
  if (!ok || !j.is_array() || j.empty() || !j[0].contains("avg_ts")) {
    std::fprintf(stderr, "epd-bench model: llama-bench %s failed\n", args.c_str());
    return std::nullopt;
  }
  return j[0]["avg_ts"].get<double>();
}

}  // namespace

std::optional<std::string> llama_tools_dir(const std::string& targets) {
  auto [out, ok] = run(quoted(std::string(EPD_SOURCE_DIR) + "/scripts/llama-tools") + " " + targets);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  if (!ok || out.empty()) {
    std::fprintf(stderr, "epd-bench: scripts/llama-tools could not build llama.cpp's %s\n", targets.c_str());
    return std::nullopt;
  }
  return out;
}

std::string llama_cpp_description() {
  return "llama-bench / llama-batched-bench, llama.cpp v0.5.0 built for this CPU (scripts/llama-tools), "
         "F16 KV cache, flash attention auto";
}

std::optional<ModelFigures> llama_cpp_figures(const std::string& gguf, const ModelWorkload& w) {
  const auto dir = tools_dir();
  if (!dir) return std::nullopt;
  const std::string common =
      "-m " + quoted(gguf) + " -t " + std::to_string(w.threads) + " -r " + std::to_string(w.repeat);
  ModelFigures f;
  const auto pp = llama_bench(*dir, common + " -p " + std::to_string(w.prompt_len) + " -n 0");
  const auto tg =
      llama_bench(*dir, common + " -p 0 -n " + std::to_string(w.steps) + " -d " + std::to_string(w.depth));
  if (!pp || !tg) return std::nullopt;
  f.prefill_tps = *pp;
  f.decode1_tps = *tg;
  // Eight sequences of `depth` prompt tokens each, then `steps` tokens each, decoded together.
  const uint32_t ctx = 8 * (w.depth + w.steps) + 64;
  auto [out, ok] =
      run(quoted(*dir + "/llama-batched-bench") + " -m " + quoted(gguf) + " -t " + std::to_string(w.threads) +
          " -c " + std::to_string(ctx) + " -npp " + std::to_string(w.depth) + " -ntg " +
          std::to_string(w.steps) + " -npl 8 --output-format jsonl 2>/dev/null");
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.value("pl", 0) == 8) f.decode8_tps = j.value("speed_tg", 0.0);
  }
  if (!ok || f.decode8_tps == 0) {
    std::fprintf(stderr, "epd-bench model: llama-batched-bench failed\n");
    return std::nullopt;
  }
  return f;
}

}  // namespace epd::bench
