#pragma once
// Tool-calling checkpoints for the end-to-end tests: a family's chat template from llama.cpp's
// models/templates (EPD_LLAMA_CPP_SRC), the special tokens it writes, and the logit biases that steer a
// random model into its call format.
//
// llama.cpp's grammar for tool_choice "required" lets any text come before a call. Where a call starts
// with one token that the grammar must follow with a call (Mistral's [TOOL_CALLS]), a bias to that token
// makes the random model's answer a call; where the start is longer (Qwen's "<tool_call>\n", Llama 3's JSON
// object) the model may write text to max_tokens, so tests check there that the answer equals epd-run's and
// that any call validates (`forces`: false).
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "epd/model/prompt_codec.hpp"
#include "llama_checkpoint.hpp"

namespace epd::testing {

struct ToolFamily {
  std::string template_file;
  std::vector<std::string> specials;
  std::string marker;  // the text a call starts with
  bool forces = true;
};

inline const ToolFamily kQwen25{
    "Qwen-Qwen2.5-7B-Instruct.jinja", {"<tool_call>", "</tool_call>"}, "<tool_call>", false};
inline const ToolFamily kMistralNemo{"mistralai-Mistral-Nemo-Instruct-2407.jinja",
                                     {"[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                                      "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]"},
                                     "[TOOL_CALLS]"};
inline const ToolFamily kLlama32{
    "meta-llama-Llama-3.2-3B-Instruct.jinja",
    {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"},
    "{",
    false};

// A random checkpoint in `dir` with the family's template and room for its tools prompt; its GGUF path.
inline std::string write_family_checkpoint(const ToolFamily& family, const std::filesystem::path& dir) {
  std::ifstream in(std::filesystem::path(EPD_LLAMA_CPP_SRC) / "models/templates" / family.template_file,
                   std::ios::binary);
  std::stringstream jinja;
  jinja << in.rdbuf();
  REQUIRE_FALSE(jinja.str().empty());
  model::testing::CheckpointSpec spec;
  spec.chat = true;
  spec.chat_template = jinja.str();
  spec.extra_special_tokens = family.specials;
  spec.add_space_prefix = false;  // text after a special token as the families' BPE tokenizers have it
  spec.context = 4096;  // the tools' prompt is ~1,000-2,000 tokens of this mostly byte-level vocabulary
  auto p = model::testing::write_llama_checkpoint(spec, dir);
  REQUIRE(p.ok());
  return p->gguf;
}

// logit_bias (token id as text -> bias) steering the random model: to the family's call marker (+10), to a
// quote (+9: a free string in a call, such as Mistral's call id, ends at once), and with `end` to its end
// token (+20), which a grammar allows once a forced call is whole.
inline nlohmann::json steering(const model::PromptCodec& codec, const ToolFamily& family, bool end) {
  auto one = [&](const std::string& text) {
    auto ids = codec.tokenizer().encode(text, /*parse_special=*/true);
    REQUIRE(ids.ok());
    REQUIRE(ids->size() == 1);
    return std::to_string(ids->front());
  };
  nlohmann::json bias = {{one(family.marker), 10}, {one("\""), 9}};
  if (end) bias[std::to_string(*codec.tokenizer().eos())] = 20;
  return bias;
}

inline nlohmann::json steering(const std::string& gguf, const ToolFamily& family, bool end) {
  auto cfg = model::load_model_path(gguf);
  REQUIRE(cfg.ok());
  auto codec = model::PromptCodec::for_model(*cfg);
  REQUIRE(codec.ok());
  return steering(**codec, family, end);
}

}  // namespace epd::testing
