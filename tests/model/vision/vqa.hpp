#pragma once
// Visual question answering on the demo model's pictures (tools/demo-model, docs/demo-model.md): the
// questions of a scenes.jsonl written by scenes.py or draw_imagemagick.py, asked colocated (epd's runner
// in-process) or of llama.cpp itself (epd-mtmd-reference), and a tally of exact answers per question type.
// The cluster is asked by the callers, through the OpenAI chat route.
#include <cstddef>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "epd/model/prompt_codec.hpp"
#include "epd/model/runner.hpp"
#include "epd/model/tokens.hpp"

namespace epd::model::testing {

struct VqaQuestion {
  std::filesystem::path image;  // PNG
  int scene = 0;                // its index in the file
  std::string type;             // describe, colour, count, exists, where
  std::string question;
  std::string answer;  // the right answer, exactly
  // The picture before the question (LLaVA's own order, and many clients'); else the question first, as
  // OpenAI's examples send the parts.
  bool picture_first = false;
};

enum class VqaPick {
  every,   // every question of every scene (one of each type)
  rotate,  // one question per scene, the types in turn (scene i gets type i mod 5)
};

// The questions of dir/scenes.jsonl, at most max_scenes scenes. Throws std::runtime_error naming the file.
std::vector<VqaQuestion> read_vqa(const std::filesystem::path& dir, VqaPick pick,
                                  size_t max_scenes = static_cast<size_t>(-1));
// The same questions with the picture first.
std::vector<VqaQuestion> picture_first(std::vector<VqaQuestion> questions);

// The user turn's text with llama.cpp's image marker where the picture stands, and the demo model's whole
// ChatML prompt around it.
std::string vqa_user_text(const VqaQuestion& q);
std::string vqa_chatml(const VqaQuestion& q);
// The user message's content as OpenAI's chat API takes it: the question's text part and the picture's
// image_url part (picture_url, e.g. a data: URI), in the question's order.
nlohmann::json vqa_openai_content(const VqaQuestion& q, const std::string& picture_url);

struct VqaAnswer {
  std::vector<TokenId> tokens;  // greedy, without the end-of-generation token
  std::string text;
  bool ended = false;  // an end-of-generation token came (colocated; llama.cpp's runs do not say)
};

// epd colocated: the runner (make_vision_runner or make_llama_runner) and the codec of its config.
VqaAnswer ask_colocated(ModelRunner& runner, const PromptCodec& codec, const VqaQuestion& q,
                        uint32_t max_tokens = 48);

// llama.cpp itself on the two files (epd-mtmd-reference).
VqaAnswer ask_llama_cpp(const std::string& reference, const std::string& lm, const std::string& mmproj,
                        const PromptCodec& codec, TokenId image_id, const VqaQuestion& q,
                        uint32_t max_tokens = 48, int threads = 1);

class VqaTally {
 public:
  void add(const std::string& type, bool right);
  size_t asked(const std::string& type) const;
  double rate(const std::string& type) const;  // right / asked, 0 when none was asked
  double overall() const;
  const std::vector<std::string>& types() const { return order_; }  // as first added
  std::string summary() const;                                      // "describe 19/20, colour 18/20, ..."

 private:
  struct Cell {
    size_t asked = 0, right = 0;
  };
  const Cell* find(const std::string& type) const;
  std::vector<std::string> order_;
  std::vector<Cell> cells_;
};

}  // namespace epd::model::testing
