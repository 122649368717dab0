// A real vision tower through the disaggregated cluster: a random LLaVA-1.5 or -1.6 ("mlp", without and
// with pinpoints), SmolVLM ("idefics3"), InternVL ("internvl"), MiniCPM-V ("minicpmv", the resampler),
// Pixtral ("pixtral"; Mistral-Small-3.1's, with the patch merger, over tcp), Gemma 3 or Qwen2-VL / Qwen2.5-VL
// (M-RoPE) mmproj with its language model, served by encoder (libmtmd), prefill and decode over shm and over
// tcp (decode in another KV layout there). Every answer, to prompts with one and two images through the
// native API and to a chat with two PNG image_url parts through the OpenAI API, is llama.cpp's own greedy
// answer (libllama + libmtmd, epd-mtmd-reference) on the same two files.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>

#include "cluster.hpp"
#include "epd/http/base64.hpp"
#include "epd/http/utf8.hpp"
#include "epd/model/chat_template.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/mmproj.hpp"
#include "epd/model/prompt_codec.hpp"
#include "openai_support.hpp"
#include "vision_fixture.hpp"
#include "vision_oracle.hpp"
#include "vision_pair.hpp"

using namespace epd;
using namespace epd::testing;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct Request {
  std::vector<model::MediaDims> sizes;
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
  size_t prompt_tokens = 0;      // llama.cpp's prompt (audio chats)
};

std::string b64(const std::vector<uint8_t>& bytes) {
  return http::base64_encode(bytes);
}

// The pair served with an f32 KV on both sides, as the oracle's: a half-precision KV cache on either side
// can turn a near tie between tokens.
ClusterSpec served(const model::testing::VisionModelPaths& paths, const std::string& backend,
                   const std::string& decode_lines, const std::string& prefill_lines) {
  ClusterSpec spec;
  spec.model_path = paths.lm;
  spec.mmproj = paths.mmproj;
  spec.backend = backend;
  spec.defaults["prefill"] = "kv_dtype = \"f32\"\n" + prefill_lines;
  spec.defaults["decode"] = "kv_dtype = \"f32\"\n" + decode_lines;
  return spec;
}

// (route, body) requests posted at once, in flight together; their (status, body) answers in order.
std::vector<std::pair<int, std::string>> post_together(
    Cluster& cluster, const std::vector<std::pair<std::string, json>>& requests) {
  std::vector<std::future<std::pair<int, std::string>>> pending;
  for (const auto& request : requests)
    pending.push_back(std::async(std::launch::async,
                                 [&] { return cluster.post_raw(request.first, request.second.dump()); }));
  std::vector<std::pair<int, std::string>> out;
  for (auto& f : pending) out.push_back(f.get());
  return out;
}

void serve_and_compare(const std::string& projector, const std::string& backend,
                       const std::string& decode_lines, model::testing::VisionSpec vs = {},
                       const std::string& prefill_lines = "") {
  const model::testing::Pair pair(projector, vs);
  const fs::path& dir = pair.dir;
  const auto codec = pair.codec();
  const model::TokenId slot = *model::image_token(pair.cfg);

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
    auto theirs = model::testing::run_mtmd_reference(EPD_MTMD_REFERENCE, pair.paths.lm, pair.paths.mmproj,
                                                     files, prompt, 10, slot, false, 2, /*f32_kv=*/true);
    e.tokens = theirs.generated;
    e.text = http::to_valid_utf8(codec->text(theirs.generated));  // as the API sends random weights' bytes
    expected.push_back(std::move(e));
  }

  Cluster cluster(served(pair.paths, backend, decode_lines, prefill_lines));
  cluster.start();
  std::vector<std::pair<std::string, json>> requests;
  for (size_t i = 0; i < kRequests.size(); ++i)
    requests.emplace_back(kRequests[i].chat ? "/v1/chat/completions" : "/v1/generate", expected[i].body);
  const auto answers = post_together(cluster, requests);
  for (size_t i = 0; i < kRequests.size(); ++i) {
    const auto& [status, raw] = answers[i];
    INFO(projector << " (" << vs.pinpoints.size() / 2 << " pinpoints, merge " << vs.spatial_merge << ") over "
                   << backend << ", request " << i << ": " << raw << "\n"
                   << cluster.logs());
    REQUIRE(status == 200);
    const json body = json::parse(raw);
    if (kRequests[i].chat) {
      CHECK(body["choices"][0]["message"]["content"] == expected[i].text);
    } else {
      auto tokens = body["tokens"].get<std::vector<uint32_t>>();
      if (!tokens.empty() && codec->ends_generation(tokens.back()))
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
}

// MiniCPM-V's resampler: heads 128 wide (clip.cpp), so a projector of whole heads.
model::testing::VisionSpec resampler() {
  model::testing::VisionSpec s;
  s.lm_width = 128;
  return s;
}

}  // namespace

TEST_CASE(
    "vision cluster: LLaVA, SmolVLM, Pixtral, InternVL and MiniCPM-V layouts over shm answer as llama.cpp "
    "does") {
  for (const char* projector : {"mlp", "idefics3", "pixtral", "internvl"})
    serve_and_compare(projector, "shm", "");
  serve_and_compare("minicpmv", "shm", "", resampler());
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
  serve_and_compare("minicpmv", "tcp", decode, resampler());
}

namespace {

// A clip as a client sends it in an input_audio part: a WAV written at its own rate, or the bundle's MP3.
struct ClipSpec {
  uint32_t rate = 16000, channels = 1;
  double seconds = 3;
  bool mp3 = false;  // llama.cpp's own test MP3 (tools/mtmd/test-2.mp3) instead
};

std::vector<uint8_t> file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Ultravox or Qwen2-Audio through the cluster: OpenAI chats with input_audio parts, in flight together,
// each answered as llama.cpp answers the same files; bad audio is a 400 naming why, and nothing is held.
void serve_audio_and_compare(const std::string& projector, const std::string& backend,
                             const std::string& decode_lines, const std::string& prefill_lines) {
  model::testing::VisionSpec vs;
  vs.lm_context = 4096;
  const model::testing::Pair pair(projector, vs);
  const fs::path& dir = pair.dir;
  const auto codec = pair.codec();
  const model::TokenId slot = *model::image_token(pair.cfg);
  const std::vector<std::vector<ClipSpec>> requests = {
      {{16000, 1, 3}},
      {{44100, 2, 31}, {16000, 1, 2}},  // resampled and mixed down, two chunks; then a second clip
      {{0, 0, 0, true}},
  };
  std::vector<Expected> expected;
  for (size_t i = 0; i < requests.size(); ++i) {
    std::vector<fs::path> files;
    json parts = json::array();
    std::string markers;
    for (size_t k = 0; k < requests[i].size(); ++k) {
      const ClipSpec& c = requests[i][k];
      if (c.mp3) {
        files.push_back(fs::path(EPD_LLAMA_CPP_SRC) / "tools/mtmd/test-2.mp3");
      } else {
        files.push_back(dir / ("clip-" + std::to_string(i) + "-" + std::to_string(k) + ".wav"));
        const auto wav = model::testing::make_test_wav(c.rate, c.channels, c.seconds, 10 * i + k);
        std::ofstream(files.back(), std::ios::binary)
            .write(reinterpret_cast<const char*>(wav.data()), std::streamsize(wav.size()));
      }
      parts.push_back(
          {{"type", "input_audio"},
           {"input_audio", {{"data", b64(file_bytes(files.back()))}, {"format", c.mp3 ? "mp3" : "wav"}}}});
      markers += model::kImageMarker;
    }
    parts.push_back({{"type", "text"}, {"text", "What do you hear?"}});
    const std::vector<model::ChatTurn> turns = {{"user", markers + "What do you hear?", true}};
    auto theirs = model::testing::run_mtmd_reference(EPD_MTMD_REFERENCE, pair.paths.lm, pair.paths.mmproj,
                                                     files, *model::render_chat_text("", turns, "", ""), 10,
                                                     slot, false, 2, /*f32_kv=*/true);
    Expected e;
    e.body = {{"messages", {{{"role", "user"}, {"content", parts}}}}, {"max_tokens", 10}};
    e.text = http::to_valid_utf8(codec->text(theirs.generated));
    e.tokens = theirs.generated;
    e.prompt_tokens = theirs.prompt.size();
    expected.push_back(std::move(e));
  }

  Cluster cluster(served(pair.paths, backend, decode_lines, prefill_lines));
  cluster.start();
  std::vector<std::pair<std::string, json>> chats;
  for (const Expected& e : expected) chats.emplace_back("/v1/chat/completions", e.body);
  const auto answers = post_together(cluster, chats);
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& [status, raw] = answers[i];
    INFO(projector << " over " << backend << ", request " << i << ": " << raw << "\n" << cluster.logs());
    REQUIRE(status == 200);
    CHECK(json::parse(raw)["choices"][0]["message"]["content"] == expected[i].text);
  }
  // The official OpenAI SDK sends the first clip as it sends input_audio (plain and streamed): llama.cpp's
  // answer again, its usage the prompt llama.cpp laid out.
  const std::string missing = node_sdk_missing();
  INFO(missing);
  REQUIRE(missing.empty());                  // fails, never skips, when the SDK cannot run
  REQUIRE(expected[0].tokens.size() == 10);  // ran to max_tokens: its text and token count are whole
  const json sdk = {
      {"cases",
       {{{"name", projector + " input_audio"},
         {"endpoint", "chat"},
         {"params", {{"messages", expected[0].body["messages"]}, {"max_tokens", 10}, {"temperature", 0}}},
         {"expect_tokens", expected[0].tokens},
         {"expect_text", expected[0].text},
         {"expect_finish", "length"},
         {"prompt_tokens", expected[0].prompt_tokens}}}}};
  std::ofstream(dir / "sdk-cases.json") << sdk.dump();
  const auto run = run_command({"node", node_sdk_dir() + "/generate.mjs", "--base-url",
                                cluster.base_url() + "/v1", "--spec", (dir / "sdk-cases.json").string()});
  INFO(run.output);
  CHECK(run.exit_code == 0);
  CHECK(run.output.find(" 0 failed") != std::string::npos);
  // Refused with a 400 that names why: a WAV cut short, bytes that are no MP3, and a picture for a model
  // that hears. Nothing is held after them.
  const auto wav = model::testing::make_test_wav(16000, 1, 2, 3);
  const auto audio_part = [](const std::vector<uint8_t>& bytes, const char* format) {
    return json{{"type", "input_audio"}, {"input_audio", {{"data", b64(bytes)}, {"format", format}}}};
  };
  const auto picture =
      json{{"type", "image_url"},
           {"image_url",
            {{"url", "data:image/png;base64," +
                         b64(model::testing::encode_png(model::make_test_image(32, 32, 1)))}}}};
  std::vector<std::pair<json, std::string>> bad = {
      {json::array({audio_part(std::vector<uint8_t>(wav.begin(), wav.begin() + wav.size() / 2), "wav")}),
       "truncated"},
      {json::array({audio_part(wav, "mp3")}), "is not an MP3 file"},
      {json::array({picture}), "takes audio, not images"},
  };
  // Qwen2-Audio's decode pool (kv_pages below) is smaller than 4 chunks of 750 rows: refused at once as the
  // request's fault, not retried against a pool it can never fit until the deadline.
  if (projector == "qwen2a")
    bad.push_back({json::array({audio_part(model::testing::make_test_wav(16000, 1, 65, 4), "wav"),
                                audio_part(wav, "wav")}),
                   "in all"});
  for (const auto& [parts, why] : bad) {
    const auto [status, raw] = cluster.post_raw(
        "/v1/chat/completions",
        json{{"messages", {{{"role", "user"}, {"content", parts}}}}, {"max_tokens", 4}}.dump());
    INFO(raw);
    CHECK(status == 400);
    CHECK_THAT(raw, Catch::Contains(why));
  }
  cluster.wait_all_free();
  const std::string reports = cluster.stop_and_collect_sanitizer_reports();
  INFO(reports);
  CHECK(reports.empty());
}

}  // namespace

TEST_CASE("vision cluster: Ultravox and Qwen2-Audio clips in OpenAI chats answer as llama.cpp does") {
  // Ultravox over shm; Qwen2-Audio over tcp into another decode KV layout, with prefill chunks of 8 that cut
  // its 750-row chunks.
  serve_audio_and_compare("ultravox", "shm", "", "");
  serve_audio_and_compare("qwen2a", "tcp",
                          "kv_page_size = 4\nkv_order = \"head_token_dim\"\nkv_pages = 700\n",
                          "chunk_tokens = 8\n");
}
