// The committed demo model (tools/demo-model, docs/demo-model.md) still loads and answers: questions about
// held-out pictures it answers right, read as text, from the F16 and the Q8_0 language model, with the same
// tokens as llama.cpp itself (epd-mtmd-reference) on the same files. The suite does not retrain it.
#include <catch2/catch.hpp>

#include <string>

#include "epd/model/generate.hpp"
#include "epd/model/image_codec.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/mmproj.hpp"
#include "epd/model/prompt_codec.hpp"
#include "epd/model/vision.hpp"
#include "vision_oracle.hpp"

namespace {

using namespace epd::model;

const std::string kDir = std::string(EPD_SOURCE_DIR) + "/tools/demo-model/out/";

struct Question {
  int scene;
  const char* question;
  const char* answer;
};

// Held-out scenes (seed 2), with answers the model gets right (tools/demo-model/out/eval-f16.txt).
const Question kQuestions[] = {
    {0, "Describe the picture.",
     "A large green circle on the left, a small orange square in the centre and a large red triangle at the "
     "bottom."},
    {0, "How many shapes are there?", "There are three shapes."},
    {1, "What colour is the square?", "The square is yellow."},
    {1, "Is there a triangle?", "No, there is no triangle."},
    {5, "Where is the circle?", "The circle is at the bottom."},
};

}  // namespace

TEST_CASE("demo model: the committed files answer questions about pictures, as llama.cpp does", "[vision]") {
  for (const char* lm : {"lm.gguf", "lm-q8_0.gguf"}) {
    auto base = read_checkpoint_config(kDir + lm);
    REQUIRE(base.ok());
    ModelConfig cfg = with_mmproj(*base, kDir + "mmproj.gguf");
    cfg.threads = 2;
    auto codec = PromptCodec::for_model(cfg);
    REQUIRE(codec.ok());
    auto runner = make_vision_runner(cfg);
    REQUIRE(runner.ok());
    for (const Question& q : kQuestions) {
      const std::string file = kDir + "eval-images/scene-2-" + std::to_string(q.scene) + ".png";
      INFO(lm << ", scene " << q.scene << ": " << q.question);
      auto image = read_image_file(file, max_rgb_bytes_for(cfg));
      REQUIRE(image.ok());
      const std::vector<ChatTurn> turns = {{"user", std::string(kImageMarker) + q.question, true}};
      const ImageDims dims[] = {{image->width, image->height}};
      auto prompt = (*codec)->chat(turns, dims);
      REQUIRE(prompt.ok());
      GenerateOptions opts;
      opts.max_tokens = 48;
      opts.stop_tokens.assign((*codec)->stop_tokens().begin(), (*codec)->stop_tokens().end());
      auto ours = generate_tokens(**runner, *prompt, opts, std::span(&*image, 1));
      REQUIRE(ours.ok());
      CHECK((*codec)->text(ours->tokens) == q.answer);
      const auto theirs =
          testing::run_mtmd_reference(EPD_MTMD_REFERENCE, kDir + lm, kDir + "mmproj.gguf", {file},
                                      std::string("<|im_start|>user\n") + std::string(kImageMarker) +
                                          q.question + "<|im_end|>\n<|im_start|>assistant\n",
                                      48, *image_token(cfg));
      std::vector<TokenId> answer = ours->tokens;
      if (ours->stopped_at_eos) answer.pop_back();
      CHECK(answer == theirs.generated);
    }
  }
}
