// A real vision tower through the disaggregated cluster: a random LLaVA-1.5 or -1.6 ("mlp", without and
// with pinpoints), SmolVLM ("idefics3"), InternVL ("internvl"), Pixtral ("pixtral"; Mistral-Small-3.1's,
// with the patch merger, over tcp), Gemma 3 or Qwen2-VL / Qwen2.5-VL (M-RoPE) mmproj with its language model,
// served by encoder (libmtmd), prefill and decode over shm and over tcp (decode in another KV layout there).
// Every answer, to prompts with one and two images through the native API and to a chat with two PNG
// image_url parts through the OpenAI API, is llama.cpp's own greedy answer (libllama + libmtmd,
// epd-mtmd-reference) on the same two files.
#include <catch2/catch.hpp>

#include <filesystem>
#include <future>

#include "cluster.hpp"
#include "epd/http/base64.hpp"
#include "epd/http/utf8.hpp"
#include "epd/model/chat_template.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/mmproj.hpp"
#include "epd/model/prompt_codec.hpp"
#include "vision_fixture.hpp"
#include "vision_oracle.hpp"

using namespace epd;
using namespace epd::testing;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct Request {
  std::vector<model::ImageDims> sizes;
  std::string text;
  bool chat = false;  // OpenAI chat with PNG parts (images first), else native /v1/generate with PPMs
};

const std::vector<Request> kRequests = {
    {{{56, 56}}, "What is this?", false},
    {{{200, 100}, {40, 72}}, "Which is wider?", false},  // LLaVA-1.6: 2 tiles + overview, then one
    {{{64, 48}, {48, 64}}, "Tell me about both.", true},
};

struct Expected {
  json body;
  std::vector<uint32_t> tokens;  // llama.cpp's greedy answer
  std::string text;              // its text (chat)
};

std::string b64(const std::vector<uint8_t>& bytes) {
  return http::base64_encode(bytes);
}

void serve_and_compare(const std::string& projector, const std::string& backend,
                       const std::string& decode_lines, model::testing::VisionSpec vs = {},
                       const std::string& prefill_lines = "") {
  const fs::path dir = fs::temp_directory_path() / ("epd-e2e-vision-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  vs.projector = projector;
  auto paths = model::testing::write_vision_model(vs, dir);
  REQUIRE(paths.ok());
  auto cfg = model::read_checkpoint_config(paths->lm);
  REQUIRE(cfg.ok());
  auto codec = model::PromptCodec::for_model(model::with_mmproj(*cfg, paths->mmproj));
  REQUIRE(codec.ok());
  const model::TokenId slot = *model::image_token(model::with_mmproj(*cfg, paths->mmproj));

  std::vector<Expected> expected;
  for (size_t i = 0; i < kRequests.size(); ++i) {
    const Request& r = kRequests[i];
    Expected e;
    std::vector<fs::path> files;
    std::string markers;
    json images = json::array(), parts = json::array();
    for (size_t k = 0; k < r.sizes.size(); ++k) {
      const auto image = model::make_test_image(r.sizes[k].width, r.sizes[k].height, 10 * i + k);
      files.push_back(dir / ("image-" + std::to_string(i) + "-" + std::to_string(k) + ".png"));
      model::testing::write_png_file(files.back(), image);
      markers += model::kImageMarker;
      images.push_back(b64(model::encode_ppm(image)));
      parts.push_back(
          {{"type", "image_url"},
           {"image_url", {{"url", "data:image/png;base64," + b64(model::testing::encode_png(image))}}}});
    }
    std::string prompt = markers + r.text;
    if (r.chat) {
      const std::vector<model::ChatTurn> turns = {{"user", prompt, true}};
      prompt = *model::render_chat_text("", turns, "", "");
      parts.push_back({{"type", "text"}, {"text", r.text}});
      e.body = {{"messages", {{{"role", "user"}, {"content", parts}}}}, {"max_tokens", 10}};
    } else {
      e.body = {{"prompt", r.text}, {"images", images}, {"max_tokens", 10}};
    }
    auto theirs = model::testing::run_mtmd_reference(EPD_MTMD_REFERENCE, paths->lm, paths->mmproj, files,
                                                     prompt, 10, slot, false, 2, /*f32_kv=*/true);
    e.tokens = theirs.generated;
    e.text = http::to_valid_utf8((*codec)->text(theirs.generated));  // as the API sends random weights' bytes
    expected.push_back(std::move(e));
  }

  ClusterSpec spec;
  spec.model_path = paths->lm;
  spec.mmproj = paths->mmproj;
  spec.backend = backend;
  // f32 KV, as the oracle's: a half-precision KV cache on either side can turn a near tie between tokens.
  spec.defaults["prefill"] = "kv_dtype = \"f32\"\n" + prefill_lines;
  spec.defaults["decode"] = "kv_dtype = \"f32\"\n" + decode_lines;
  Cluster cluster(spec);
  cluster.start();
  std::vector<std::future<std::pair<int, std::string>>> answers;
  for (size_t i = 0; i < kRequests.size(); ++i)  // in flight together
    answers.push_back(std::async(std::launch::async, [&, i] {
      return cluster.post_raw(kRequests[i].chat ? "/v1/chat/completions" : "/v1/generate",
                              expected[i].body.dump());
    }));
  for (size_t i = 0; i < kRequests.size(); ++i) {
    const auto [status, raw] = answers[i].get();
    INFO(projector << " (" << vs.pinpoints.size() / 2 << " pinpoints, merge " << vs.spatial_merge << ") over "
                   << backend << ", request " << i << ": " << raw << "\n"
                   << cluster.logs());
    REQUIRE(status == 200);
    const json body = json::parse(raw);
    if (kRequests[i].chat) {
      CHECK(body["choices"][0]["message"]["content"] == expected[i].text);
    } else {
      auto tokens = body["tokens"].get<std::vector<uint32_t>>();
      if (!tokens.empty() && (*codec)->ends_generation(tokens.back()))
        tokens.pop_back();  // llama.cpp's run ends before the end token
      CHECK(tokens == expected[i].tokens);
      CHECK(body["instances"]["encoder"] == "encoder-0");
    }
  }
  // An image the Idefics3 tiling cannot lay out, and a text-typed marker, are refused; nothing is held.
  const auto [thin_status, thin] = cluster.post_raw(
      "/v1/generate",
      json{{"prompt", "x"}, {"images", {b64(model::encode_ppm(model::make_test_image(600, 4, 1)))}}}.dump());
  CHECK(thin_status == (projector == "idefics3" ? 400 : 200));
  cluster.wait_all_free();
  const std::string reports = cluster.stop_and_collect_sanitizer_reports();
  INFO(reports);
  CHECK(reports.empty());
  fs::remove_all(dir);
}

}  // namespace

TEST_CASE("vision cluster: LLaVA, SmolVLM, Pixtral and InternVL layouts over shm answer as llama.cpp does") {
  for (const char* projector : {"mlp", "idefics3", "pixtral", "internvl"})
    serve_and_compare(projector, "shm", "");
  model::testing::VisionSpec anyres;  // LLaVA-1.6
  anyres.pinpoints = {224, 112, 112, 224, 224, 224};
  serve_and_compare("mlp", "shm", "", anyres);
}

TEST_CASE("vision cluster: Gemma 3's images, which prefill chunks of 8 never cut, answer as llama.cpp does") {
  // 16-row images whose rows see each other both ways; grid lines every 8 tokens fall inside them.
  serve_and_compare("gemma3", "shm", "", {}, "chunk_tokens = 8\n");
  serve_and_compare("gemma3", "tcp", "kv_page_size = 4\nkv_order = \"head_token_dim\"\n", {},
                    "chunk_tokens = 8\n");
}

TEST_CASE("vision cluster: Qwen2-VL's M-RoPE images, cut by prefill chunks of 8, answer as llama.cpp does") {
  // Image rows rotate by (t, y, x) and text after an image resumes max(cols, rows) on: prefill and decode
  // know where from SUBMIT's image_grids; grid lines every 8 tokens fall inside the images.
  serve_and_compare("qwen2vl", "shm", "", {}, "chunk_tokens = 8\n");
  serve_and_compare("qwen2.5vl", "tcp", "kv_page_size = 4\nkv_order = \"head_token_dim\"\n", {},
                    "chunk_tokens = 8\n");
}

TEST_CASE("vision cluster: over tcp, decode in another KV layout, answers as llama.cpp does") {
  const std::string decode = "kv_page_size = 4\nkv_order = \"head_token_dim\"\n";
  for (const char* projector : {"mlp", "idefics3"}) serve_and_compare(projector, "tcp", decode);
  model::testing::VisionSpec merged;  // Mistral-Small-3.1's patch merger
  merged.spatial_merge = 2;
  serve_and_compare("pixtral", "tcp", decode, merged);
}
