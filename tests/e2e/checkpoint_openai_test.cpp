// A Llama-family checkpoint with its own SentencePiece vocabulary and ChatML template, served by the cluster
// (router, encoder, prefill, decode as processes) through the official OpenAI Node SDK: completions and
// chat, plain and streamed, give exactly the colocated run's text and token count, over shm, over tcp, and
// staged into a decode that holds its KV in fp16 pages of another size (the reference then decodes from an
// fp16 copy of the prompt's KV, as the cluster does). The unstaged colocated run is checked twice over:
// epd-run (text in, tokens out) and llama.cpp's greedy continuation of the same prompt ids (node-llama-cpp),
// so the text path, the template and the stop at an end token are not only self-consistent.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cluster.hpp"
#include "epd/http/base64.hpp"
#include "epd/http/utf8.hpp"
#include "epd/model/generate.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/prompt_codec.hpp"
#include "llama_checkpoint.hpp"
#include "openai_support.hpp"

using namespace epd;
using namespace epd::testing;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr uint32_t kOpenaiChunk = 64;  // the prefill role's default chunk_tokens
constexpr int kMaxTokens = 12;

struct ChatCheckpoint {
  ChatCheckpoint() {
    dir = fs::temp_directory_path() / ("epd-e2e-chatckpt-" + std::to_string(::getpid()));
    model::testing::CheckpointSpec spec;
    spec.chat = true;
    auto p = model::testing::write_llama_checkpoint(spec, dir);
    REQUIRE(p.ok());
    gguf = p->gguf;
    auto c = model::load_model_path(gguf);
    REQUIRE(c.ok());
    cfg = *c;
    auto r = model::make_runner(cfg);
    REQUIRE(r.ok());
    runner = std::move(*r);
    auto k = model::PromptCodec::for_model(cfg);
    if (!k) FAIL(k.error().to_string());
    codec = *k;
  }
  ~ChatCheckpoint() { fs::remove_all(dir); }
  fs::path dir;
  std::string gguf;
  model::ModelConfig cfg;
  std::unique_ptr<model::ModelRunner> runner;
  std::shared_ptr<const model::PromptCodec> codec;
};

struct Case {
  std::string name;
  bool chat = false;
  std::string prompt;  // completions: the prompt; chat: the user's message
  std::string system;  // chat: a system message first, if not empty
};

std::vector<model::ChatTurn> turns_of(const Case& c) {
  std::vector<model::ChatTurn> turns;
  if (!c.system.empty()) turns.push_back({"system", c.system, false});
  turns.push_back({"user", c.prompt, false});
  return turns;
}

std::vector<uint32_t> prompt_ids(const ChatCheckpoint& ck, const Case& c) {
  auto ids = c.chat ? ck.codec->chat(turns_of(c), {}) : ck.codec->prompt(c.prompt, {});
  if (!ids) FAIL(ids.error().to_string());
  return *ids;
}

// The colocated run (generate_tokens, the code epd-run uses), stopping where the codec says.
// `decode_kv`: decode's KV layout when it differs from prefill's (the staged path).
model::GenerateResult colocated(const ChatCheckpoint& ck, const std::vector<uint32_t>& prompt,
                                const std::optional<model::KvLayoutChoice>& decode_kv = std::nullopt,
                                const model::SamplingParams& sampling = {},
                                model::DType dtype = model::DType::f16) {
  model::GenerateOptions opts;
  opts.dtype = dtype;
  opts.sampling = sampling;
  opts.max_tokens = kMaxTokens;
  opts.chunk = kOpenaiChunk;
  opts.decode_kv = decode_kv;
  opts.stop_tokens.assign(ck.codec->stop_tokens().begin(), ck.codec->stop_tokens().end());
  auto r = model::generate_tokens(*ck.runner, prompt, opts);
  REQUIRE(r.ok());
  return *r;
}

// epd-run on the same text: its tokens.
std::vector<uint32_t> epd_run(const ChatCheckpoint& ck, const Case& c) {
  std::vector<std::string> argv = {std::string(EPD_BIN_DIR) + "/epd-run",
                                   "--model",
                                   ck.gguf,
                                   "--json",
                                   "--chunk",
                                   std::to_string(kOpenaiChunk),
                                   "--max-tokens",
                                   std::to_string(kMaxTokens),
                                   "--prompt",
                                   c.prompt};
  if (c.chat) argv.push_back("--chat");
  if (!c.system.empty()) argv.insert(argv.end(), {"--system", c.system});
  const auto r = run_command(argv);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  for (size_t pos = 0; pos < r.output.size();) {
    const size_t end = r.output.find('\n', pos);
    const auto j = json::parse(r.output.substr(pos, end - pos), nullptr, false);
    pos = end == std::string::npos ? r.output.size() : end + 1;
    if (j.is_object() && j.contains("tokens")) return j["tokens"].get<std::vector<uint32_t>>();
  }
  FAIL("epd-run printed no tokens");
  return {};
}

// What the SDK must read for a case (generate.mjs's spec). The unstaged colocated run is first checked
// against epd-run (f16 KV, as the roles), and the same run in f32 KV against llama.cpp (which holds f32 KV
// throughout: a comparison of the model's arithmetic, without KV rounding); a staged one follows from it by
// construction.
json expectation(const ChatCheckpoint& ck, const Case& c,
                 const std::optional<model::KvLayoutChoice>& decode_kv) {
  const auto prompt = prompt_ids(ck, c);
  const auto ref = colocated(ck, prompt, decode_kv);
  INFO(c.name);
  if (!decode_kv) {
    CHECK(epd_run(ck, c) == ref.tokens);
    const auto greedy = llama_cpp_greedy(ck.gguf, ck.dir.string(), prompt, kMaxTokens);
    const auto exact = colocated(ck, prompt, std::nullopt, {}, model::DType::f32);
    REQUIRE(greedy.size() >= exact.tokens.size());
    CHECK(std::vector<uint32_t>(greedy.begin(), greedy.begin() + exact.tokens.size()) == exact.tokens);
  }
  json params = {{"max_tokens", kMaxTokens}, {"temperature", 0}};
  if (c.chat) {
    params["messages"] = json::array();
    if (!c.system.empty()) params["messages"].push_back({{"role", "system"}, {"content", c.system}});
    params["messages"].push_back({{"role", "user"}, {"content", c.prompt}});
  } else {
    params["prompt"] = c.prompt;
  }
  return {{"name", c.name},
          {"endpoint", c.chat ? "chat" : "completions"},
          {"params", params},
          {"expect_tokens", ref.tokens},
          {"expect_text", http::to_valid_utf8(ck.codec->text(ref.tokens))},
          {"expect_finish", ref.stopped_at_eos ? "stop" : "length"},
          {"prompt_tokens", prompt.size()}};
}

// A completions prompt whose greedy answer ends at one of the checkpoint's end tokens before max_tokens:
// searched among word-piece prompts, not hard-coded, so it survives a change of the generator's weights.
std::string ending_prompt(const ChatCheckpoint& ck) {
  for (int i = 0; i < 400; ++i) {
    const std::string prompt = "w" + std::to_string(261 + i % 123) + " w" +
                               std::to_string(261 + (i * 7) % 123) + " w" +
                               std::to_string(261 + (i / 123) * 31 % 123);
    if (colocated(ck, *ck.codec->prompt(prompt, {})).stopped_at_eos) return prompt;
  }
  FAIL("no prompt among 400 makes the checkpoint generate an end token within " << kMaxTokens << " tokens");
  return "";
}

void serve_through_sdk(const std::string& backend, const std::string& decode_lines = "",
                       const std::optional<model::KvLayoutChoice>& decode_kv = std::nullopt) {
  const std::string missing = node_sdk_missing();
  INFO(missing);
  REQUIRE(missing.empty());  // fails, never skips, when the SDK cannot run
  ChatCheckpoint ck;
  REQUIRE(ck.codec->chat_template() != nullptr);
  const std::vector<Case> cases = {
      {"completion of word pieces", false, "w300 w271 w350", ""},
      {"completion with accents CJK and an emoji (byte pieces)", false,
       "caf\xC3\xA9 \xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\x98\x80 w333", ""},
      {"completion that ends at an end token", false, ending_prompt(ck), ""},
      {"chat with a system message", true, "w290 w291 w292?", "w280 w281"},
      {"chat of one user message", true, "w310 \xC3\xA9t\xC3\xA9", ""},
  };
  json spec = {{"cases", json::array()}};
  for (const auto& c : cases) spec["cases"].push_back(expectation(ck, c, decode_kv));
  for (size_t i : {0, 1, 3, 4}) {  // these answers run to max_tokens: text all the way
    INFO(spec["cases"][i].dump());
    CHECK(spec["cases"][i]["expect_finish"] == "length");
  }

  ClusterSpec cs;
  cs.model_path = ck.gguf;
  cs.backend = backend;
  if (!decode_lines.empty()) cs.defaults["decode"] = decode_lines;
  Cluster cluster(cs);
  cluster.start();
  const fs::path spec_file = ck.dir / "cases.json";
  std::ofstream(spec_file) << spec.dump(2);
  const auto r = run_command({"node", node_sdk_dir() + "/generate.mjs", "--base-url",
                              cluster.base_url() + "/v1", "--spec", spec_file.string()});
  INFO(spec.dump(2));
  INFO(r.output);
  INFO(cluster.logs());  // a client that could not connect: what the router said meanwhile
  CHECK(r.exit_code == 0);
  CHECK(r.output.find(" 0 failed") != std::string::npos);

  // logprobs on a checkpoint: every token's, the first (prefill's) included, as the colocated run reports
  // them (staged into fp16 pages too: the colocated run stages the same way), each token and alternative
  // spelled by its piece's bytes. The first token's are equal bit for bit; decode's too when the colocated
  // run decodes in decode's KV layout (the staged case: measured 0). Unstaged, the colocated run decodes in
  // prefill's pages and decode's differ in the last bits (measured 1.9e-6; the tokens never differ), so
  // they are compared within 1e-4.
  {
    const Case& c = cases[3];
    model::SamplingParams asked;
    asked.logprobs = true;
    asked.top_logprobs = 3;
    const auto ref = colocated(ck, prompt_ids(ck, c), decode_kv, asked);
    json body = spec["cases"][3]["params"];
    body.update({{"logprobs", true}, {"top_logprobs", 3}});
    const auto [lp_status, lp_body] = cluster.post_raw("/v1/chat/completions", body.dump());
    REQUIRE(lp_status == 200);
    const json content = json::parse(lp_body)["choices"][0]["logprobs"]["content"];
    REQUIRE(content.size() == ref.tokens.size());
    auto bytes_of = [&](uint32_t id) {
      json out = json::array();
      for (unsigned char b : ck.codec->tokenizer().piece(id, /*render_special=*/true)) out.push_back(int(b));
      return out;
    };
    double worst = 0;  // the largest difference of any logprob, chosen or alternative
    auto differs = [&](const json& got, float want) {
      const double d = std::fabs(got.get<double>() - double(want));
      worst = std::max(worst, d);
      return d;
    };
    for (size_t i = 0; i < content.size(); ++i) {
      INFO("token " << i);
      if (i == 0) CHECK(float(content[0]["logprob"].get<double>()) == ref.logprobs[0].logprob);
      CHECK(differs(content[i]["logprob"], ref.logprobs[i].logprob) <= 1e-4);
      CHECK(content[i]["bytes"] == bytes_of(ref.tokens[i]));
      REQUIRE(content[i]["top_logprobs"].size() == 3);
      for (size_t k = 0; k < 3; ++k) {
        CHECK(content[i]["top_logprobs"][k]["bytes"] == bytes_of(ref.logprobs[i].top[k].id));
        CHECK(differs(content[i]["top_logprobs"][k]["logprob"], ref.logprobs[i].top[k].logprob) <= 1e-4);
      }
    }
    std::printf("checkpoint logprobs over %s: %zu tokens, largest difference from the colocated run %.3g\n",
                backend.c_str(), content.size(), worst);

    // The same through /v1/generate ("logprobs": 3), the prompt as its token ids: each token's id, logprob
    // and alternatives (ids) as the colocated run has them.
    const auto [native_status, native] = cluster.generate(
        {{"prompt_tokens", prompt_ids(ck, c)}, {"max_tokens", ref.tokens.size()}, {"logprobs", 3}});
    REQUIRE(native_status == 200);
    const json per_token = native["logprobs"];
    REQUIRE(per_token.size() == native["tokens"].size());
    REQUIRE(per_token.size() >= content.size());
    for (size_t i = 0; i < content.size(); ++i) {
      INFO("/v1/generate token " << i);
      CHECK(per_token[i]["token"] == ref.tokens[i]);
      if (i == 0) CHECK(float(per_token[0]["logprob"].get<double>()) == ref.logprobs[0].logprob);
      CHECK(differs(per_token[i]["logprob"], ref.logprobs[i].logprob) <= 1e-4);
      REQUIRE(per_token[i]["top"].size() == 3);
      for (size_t k = 0; k < 3; ++k) CHECK(per_token[i]["top"][k]["token"] == ref.logprobs[i].top[k].id);
    }
    // Not asked for: not there.
    const auto [plain_status, plain] =
        cluster.generate({{"prompt_tokens", prompt_ids(ck, c)}, {"max_tokens", ref.tokens.size()}});
    REQUIRE(plain_status == 200);
    CHECK_FALSE(plain.contains("logprobs"));
  }

  // /v1/generate takes the same text, and says the text back.
  const auto [status, body] = cluster.generate({{"prompt", cases[0].prompt}, {"max_tokens", kMaxTokens}});
  REQUIRE(status == 200);
  CHECK(body["tokens"] == spec["cases"][0]["expect_tokens"]);
  CHECK(body["text"] == spec["cases"][0]["expect_text"]);

  // Clear errors: a prompt longer than the context, a chat without messages, an image for a text model.
  std::string long_prompt;
  for (uint32_t i = 0; i < ck.cfg.max_seq; ++i) long_prompt += "w300 ";
  const auto [long_status, long_body] =
      cluster.post_raw("/v1/completions", json{{"prompt", long_prompt}, {"max_tokens", 4}}.dump());
  CHECK(long_status == 400);
  CHECK_THAT(long_body, Catch::Contains("does not fit max_seq"));
  const auto [empty_status, empty_body] =
      cluster.post_raw("/v1/chat/completions", json{{"messages", json::array()}}.dump());
  CHECK(empty_status == 400);
  CHECK_THAT(empty_body, Catch::Contains("must not be empty"));
  std::ifstream png_file(node_sdk_dir() + "/fixtures/checker.png", std::ios::binary);
  const std::vector<uint8_t> png((std::istreambuf_iterator<char>(png_file)),
                                 std::istreambuf_iterator<char>());
  const json image_part = {{"type", "image_url"},
                           {"image_url", {{"url", "data:image/png;base64," + http::base64_encode(png)}}}};
  const json image_chat = {{"messages", {{{"role", "user"}, {"content", {image_part}}}}}};
  const auto [image_status, image_body] = cluster.post_raw("/v1/chat/completions", image_chat.dump());
  CHECK(image_status == 400);
  CHECK_THAT(image_body, Catch::Contains("takes no images"));
  cluster.wait_all_free();
  const std::string reports = cluster.stop_and_collect_sanitizer_reports();
  INFO(reports);
  CHECK(reports.empty());
}

}  // namespace

TEST_CASE("checkpoint through the OpenAI SDK over shm equals epd-run and llama.cpp") {
  serve_through_sdk("shm");
}

TEST_CASE("checkpoint through the OpenAI SDK over tcp equals epd-run and llama.cpp") {
  serve_through_sdk("tcp");
}

TEST_CASE("checkpoint through the OpenAI SDK staged into an fp32 decode equals the staged colocated run") {
  serve_through_sdk("shm", "kv_dtype = \"f32\"\nkv_page_size = 32\n",
                    model::KvLayoutChoice{32, model::DType::f32, model::KvDimOrder::token_head_dim});
}

// A template that thinks (Qwen3's, from llama.cpp's models/templates): the answer's <think> block is read
// out by llama.cpp's parser for that template, as llama-server returns it — message.reasoning_content and
// the rest as content; streamed, delta.reasoning_content chunks first, then delta.content. A grammar makes
// the random model write a thinking answer; the same answer without the template's thinking is content.
TEST_CASE("a thinking template's answer: reasoning_content apart from content, plain and streamed") {
  std::ifstream in(fs::path(EPD_LLAMA_CPP_SRC) / "models/templates/Qwen-Qwen3-0.6B.jinja", std::ios::binary);
  std::stringstream jinja;
  jinja << in.rdbuf();
  REQUIRE_FALSE(jinja.str().empty());
  const fs::path dir = fs::temp_directory_path() / ("epd-e2e-thinking-" + std::to_string(::getpid()));
  model::testing::CheckpointSpec spec;
  spec.chat = true;
  spec.chat_template = jinja.str();
  auto paths = model::testing::write_llama_checkpoint(spec, dir);
  REQUIRE(paths.ok());
  ClusterSpec cs;
  cs.model_path = paths->gguf;
  Cluster cluster(cs);
  cluster.start();
  const json body = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
                     {"max_tokens", 64},
                     {"grammar", "root ::= \"<think>\\nIt is in France.\\n</think>\\n\\nSunny.\""}};
  const auto [status, raw] = cluster.post_raw("/v1/chat/completions", body.dump());
  INFO(raw);
  REQUIRE(status == 200);
  const json message = json::parse(raw)["choices"][0]["message"];
  CHECK(message["reasoning_content"] == "It is in France.\n");  // llama.cpp's parser keeps the newline
  CHECK(message["content"] == "Sunny.");

  json streamed = body;
  streamed["stream"] = true;
  const auto [s_status, sse] = cluster.post_raw("/v1/chat/completions", streamed.dump());
  REQUIRE(s_status == 200);
  std::string reasoning, content;
  bool content_after_reasoning = true;
  std::istringstream lines(sse);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("data: {", 0) != 0) continue;
    const json delta = json::parse(line.substr(6))["choices"][0]["delta"];
    if (delta.contains("reasoning_content")) {
      if (!content.empty()) content_after_reasoning = false;
      reasoning += delta["reasoning_content"].get<std::string>();
    }
    if (delta.contains("content") && delta["content"].is_string())
      content += delta["content"].get<std::string>();
  }
  CHECK(reasoning == "It is in France.\n");
  CHECK(content == "Sunny.");
  CHECK(content_after_reasoning);
  cluster.wait_all_free();
  fs::remove_all(dir);
}
