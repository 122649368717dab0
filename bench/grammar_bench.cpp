#include "grammar_bench.hpp"

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "epd/model/grammar.hpp"

namespace grammar_bench {

using clock = std::chrono::steady_clock;

struct Row {
  double apply_us = 0;  // mean per token: the full mask (a sampled draw, or a greedy one the grammar refused)
  double allows_us = 0;  // the one-token check a greedy draw tries first
  double accept_us = 0;
  double masked_draw_us = 0;  // a sampled top_k 40 draw as before: the full mask, then the draw
  double top_k_draw_us =
      0;  // the same draw through sample_constrained (the top_k shortcut when it finds them)
  size_t tokens = 0;
};

// A walk through the grammar: random logits each step, masked, the best allowed token accepted, until the
// grammar is complete (or `max` tokens); the same seed gives the same walk.
Row walk(const std::shared_ptr<const epd::model::GrammarVocab>& vocab, const std::string& gbnf, size_t max,
         uint64_t seed) {
  auto g = epd::model::Grammar::make(vocab, gbnf);
  if (!g) {
    std::fprintf(stderr, "epd-bench grammar: %s\n", g.error().to_string().c_str());
    return {};
  }
  const uint32_t n = epd::model::vocab_size(*vocab);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> logits(n);
  Row row;
  double apply = 0, allows = 0, accept = 0, masked_draw = 0, top_k_draw = 0;
  epd::model::SamplingParams top40;
  top40.temperature = 0.8f;
  top40.top_k = 40;
  for (size_t i = 0; i < max; ++i) {
    for (float& x : logits) x = normal(rng);
    // Random logits are the shortcut's worst case: a model mostly prefers what the grammar allows.
    std::vector<float> copy = logits;
    const auto d0 = clock::now();
    (*g)->apply(copy);
    const auto drawn = epd::model::sample_token(copy, top40, uint32_t(i), epd::model::TokenFilter::none);
    const auto d1 = clock::now();
    copy = logits;
    const auto d2 = clock::now();
    const auto fast =
        epd::model::sample_constrained(copy, top40, uint32_t(i), epd::model::TokenFilter::none, {}, g->get());
    const auto d3 = clock::now();
    if (fast != drawn)
      std::fprintf(stderr, "epd-bench grammar: the top_k shortcut drew %u, the mask %u\n", fast, drawn);
    masked_draw += std::chrono::duration<double, std::micro>(d1 - d0).count();
    top_k_draw += std::chrono::duration<double, std::micro>(d3 - d2).count();
    const auto t0 = clock::now();
    (*g)->apply(logits);
    const auto t1 = clock::now();
    uint32_t best = 0;
    for (uint32_t t = 1; t < n; ++t)
      if (logits[t] > logits[best]) best = t;
    if (!std::isfinite(logits[best])) break;  // nothing left: complete
    const auto t2 = clock::now();
    const bool ok = (*g)->allows(best);
    const auto t3 = clock::now();
    if (!ok || !(*g)->accept(best)) break;
    const auto t4 = clock::now();
    apply += std::chrono::duration<double, std::micro>(t1 - t0).count();
    allows += std::chrono::duration<double, std::micro>(t3 - t2).count();
    accept += std::chrono::duration<double, std::micro>(t4 - t3).count();
    ++row.tokens;
    if ((*g)->complete()) break;
  }
  if (row.tokens) {
    row.apply_us = apply / double(row.tokens);
    row.allows_us = allows / double(row.tokens);
    row.accept_us = accept / double(row.tokens);
    row.masked_draw_us = masked_draw / double(row.tokens);
    row.top_k_draw_us = top_k_draw / double(row.tokens);
  }
  return row;
}

}  // namespace grammar_bench

int run_grammar_bench(int argc, char** argv) {
  CLI::App app{"epd-bench grammar: the grammar mask's cost per generated token"};
  std::vector<std::string> files;
  size_t tokens = 200;
  uint64_t seed = 1;
  app.add_option("--gguf", files,
                 "GGUF files whose vocabularies to run over (default: the demo model's and "
                 "llama.cpp's vocab-only files of Llama 2, Llama 3, Qwen 2)");
  app.add_option("--tokens", tokens, "tokens per walk at most");
  app.add_option("--seed", seed, "seed of the random logits");
  CLI11_PARSE(app, argc, argv);
  if (files.empty()) {
    const std::string src = EPD_SOURCE_DIR;
    files = {src + "/tools/demo-model/out/lm.gguf"};
    for (const char* v : {"llama-spm", "llama-bpe", "qwen2"})
      files.push_back(std::string(EPD_LLAMA_CPP_MODELS) + "/ggml-vocab-" + v + ".gguf");
  }
  const std::string schema = R"({"type":"object","properties":{"name":{"type":"string","maxLength":40},)"
                             R"("age":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"}}},)"
                             R"("required":["name","age","tags"]})";
  auto schema_gbnf = epd::model::json_schema_grammar(schema);
  const std::vector<std::pair<std::string, std::string>> grammars = {
      {"yes|no", R"(root ::= "yes" | "no")"},
      {"json_object", epd::model::json_object_grammar()},
      {"json_schema", schema_gbnf ? *schema_gbnf : ""},
  };
  std::printf("%-28s %8s  %-12s %7s %13s %13s %13s %15s %15s\n", "vocabulary", "tokens", "grammar", "walked",
              "mask us/tok", "check us/tok", "accept us/tok", "k40 masked us", "k40 shortcut us");
  for (const auto& f : files) {
    auto vocab = epd::model::load_grammar_vocab_file(f);
    if (!vocab) {
      std::fprintf(stderr, "epd-bench grammar: %s\n", vocab.error().to_string().c_str());
      return 1;
    }
    const std::string name = f.substr(f.find_last_of('/') + 1);
    for (const auto& [gname, gbnf] : grammars) {
      const auto row = grammar_bench::walk(*vocab, gbnf, tokens, seed);
      std::printf("%-28s %8u  %-12s %7zu %13.1f %13.1f %13.1f %15.1f %15.1f\n", name.c_str(),
                  epd::model::vocab_size(**vocab), gname.c_str(), row.tokens, row.apply_us, row.allows_us,
                  row.accept_us, row.masked_draw_us, row.top_k_draw_us);
    }
  }
  return 0;
}
