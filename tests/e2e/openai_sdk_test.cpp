// The router's OpenAI-compatible API through the official OpenAI Node SDK (tests/http/node) and raw curl,
// against a real cluster on 127.0.0.1; answers are compared with the colocated runner, epd-run, given the
// same sampling parameters. Also runs `epd-bench serve` briefly so the load generator keeps working.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <set>

#include "cluster.hpp"
#include "openai_support.hpp"

using namespace epd::testing;
using nlohmann::json;

namespace {

const std::string kPpm = std::string(EPD_SOURCE_DIR) + "/configs/images/checker.ppm";
// The same pixels as kPpm, as PNG: the SDK sends this one, epd-run reads the PPM.
const std::string kPng = std::string(EPD_SOURCE_DIR) + "/tests/http/node/fixtures/checker.png";

// Fails (never skips) when the SDK cannot run: a missing tool must not pass as a green test.
void require_node_sdk() {
  const std::string missing = node_sdk_missing();
  INFO(missing);
  REQUIRE(missing.empty());
}

std::string base_url(const Cluster& c) {
  return c.base_url() + "/v1";
}

std::filesystem::path temp_file(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("epd-openai-" + std::to_string(::getpid()) + "-" + name);
}

// The prompt the router builds from chat messages: the reference model's ChatML-like template
// (docs/model.md, "Chat template"), text parts joined with "\n", images leaving no mark in the text.
std::string chat_prompt(const json& messages) {
  std::string out;
  for (const auto& m : messages) {
    std::string text;
    if (m["content"].is_string()) {
      text = m["content"].get<std::string>();
    } else {
      bool first = true;
      for (const auto& part : m["content"])
        if (part["type"] == "text") {
          text += (first ? "" : "\n") + part["text"].get<std::string>();
          first = false;
        }
    }
    out += "<|im_start|>" + m["role"].get<std::string>() + "\n" + text + "<|im_end|>\n";
  }
  return out + "<|im_start|>assistant\n";
}

struct SpecCase {
  std::string name;
  bool chat;
  json params;  // prompt or messages, max_tokens
  Sampling sampling;
  bool image = false;
  int n = 1;  // choices: choice i must equal a single request with seed + i
};

// The cases with their reference tokens, as generate.mjs reads them.
json make_spec(const std::vector<SpecCase>& cases) {
  json spec = {{"cases", json::array()}};
  for (const auto& c : cases) {
    json params = c.params;
    params.update(sampling_body(c.sampling));
    const int max_tokens = params["max_tokens"];
    const std::string prompt = c.chat ? chat_prompt(params["messages"]) : params["prompt"].get<std::string>();
    const auto ref = reference(prompt, max_tokens, c.image ? kPpm : "", c.sampling);
    json one = {{"name", c.name},
                {"endpoint", c.chat ? "chat" : "completions"},
                {"params", params},
                {"expect_tokens", ref.tokens},
                {"prompt_tokens", ref.prompt_tokens}};
    if (c.n > 1) {
      one["params"]["n"] = c.n;
      one["expect_choices"] = json::array({ref.tokens});
      for (int i = 1; i < c.n; ++i) {
        Sampling s = c.sampling;
        s.seed = s.seed.value_or(0) + uint64_t(i);
        one["expect_choices"].push_back(reference(prompt, max_tokens, c.image ? kPpm : "", s).tokens);
      }
      // Choices that all agreed would not show each one drawn with its own seed.
      std::set<json> distinct(one["expect_choices"].begin(), one["expect_choices"].end());
      INFO(c.name);
      CHECK(distinct.size() > 1);
    }
    spec["cases"].push_back(std::move(one));
  }
  return spec;
}

// `env`: NAME=value settings for node (through env(1)), e.g. the API key and the CA of a TLS router.
CommandResult run_node(const std::string& script, const Cluster& c, const json& spec,
                       const std::vector<std::string>& env = {}) {
  const auto path = temp_file(script + ".json");
  std::ofstream(path) << spec.dump(2);
  std::vector<std::string> argv = {"env"};
  argv.insert(argv.end(), env.begin(), env.end());
  for (std::string a : {std::string("node"), node_sdk_dir() + "/" + script, std::string("--base-url"),
                        base_url(c), std::string("--spec"), path.string()})
    argv.push_back(std::move(a));
  auto r = run_command(argv);
  std::filesystem::remove(path);
  return r;
}

json user(const json& content) {
  return {{"role", "user"}, {"content", content}};
}

// A valid 2- or 3-byte UTF-8 character among the bytes: streamed in one-byte deltas, it is split unless the
// router holds its first bytes back.
bool has_multibyte_char(const std::vector<int>& tokens) {
  auto cont = [&](size_t i) { return i < tokens.size() && tokens[i] >= 0x80 && tokens[i] <= 0xbf; };
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int b = tokens[i];
    if (b >= 0xc2 && b <= 0xdf && cont(i + 1)) return true;
    if (b >= 0xe1 && b <= 0xec && cont(i + 1) && cont(i + 2)) return true;
  }
  return false;
}

// A completions prompt whose greedy answer holds a multi-byte character: searched, not hard-coded, so it
// survives a change of the model's weights.
std::string multibyte_prompt(int max_tokens) {
  for (int i = 0; i < 64; ++i) {
    const std::string prompt = "Say something #" + std::to_string(i);
    if (has_multibyte_char(reference(prompt, max_tokens).tokens)) return prompt;
  }
  FAIL("no prompt among 64 gives an answer with a multi-byte UTF-8 character");
  return "";
}

}  // namespace

TEST_CASE("OpenAI SDK: completions and chat, plain and streamed, equal epd-run", "[e2e][multiproc][openai]") {
  require_node_sdk();
  Cluster cluster(ClusterSpec{});
  cluster.start();
  Sampling sampled;
  sampled.temperature = 0.8;
  sampled.top_p = 0.9;
  sampled.top_k = 40;
  sampled.min_p = 0.3;
  sampled.seed = 1234;
  // Greedy, with the byte "e" banned and "z" pushed: the answer must change where they were or would be.
  Sampling biased;
  biased.logit_bias = {{uint32_t('e'), -100.0}, {uint32_t('z'), 5.0}};
  // The penalties read the prompt (repetition) and the answer so far (all three): prefill's first token and
  // decode's must count the same tokens as epd-run's.
  Sampling penalized;
  penalized.frequency_penalty = 0.8;
  penalized.presence_penalty = 0.5;
  penalized.repetition_penalty = 1.3;
  Sampling sampled_penalized = sampled;
  sampled_penalized.presence_penalty = 1.5;
  sampled_penalized.frequency_penalty = -0.4;
  sampled_penalized.repetition_penalty = 1.6;
  // Each penalty alone changes this greedy answer (24 tokens of it repeat some), so the cluster's equality
  // below is no accident.
  const std::string penalty_prompt = "Say it again #0";
  const auto plain_answer = reference(penalty_prompt, 24).tokens;
  for (int which = 0; which < 3; ++which) {
    Sampling one;
    (which == 0 ? one.frequency_penalty : which == 1 ? one.presence_penalty : one.repetition_penalty) = 1.5;
    INFO("penalty " << which);
    CHECK(reference(penalty_prompt, 24, "", one).tokens != plain_answer);
  }
  CHECK(reference(penalty_prompt, 24, "", penalized).tokens != plain_answer);
  Sampling hot;  // a picture's answers differ little at sampled's temperature
  hot.temperature = 1.5;
  hot.seed = 99;
  const json image_message =
      user(json::array({{{"type", "image_url"}, {"image_url", {{"url", "@file:" + kPng}}}},
                        {{"type", "text"}, {"text", "What is it?"}}}));
  const std::vector<SpecCase> cases = {
      {"completion greedy", false, {{"prompt", "Hello, epd!"}, {"max_tokens", 12}}, {}},
      {"completion seeded sampling", false, {{"prompt", "Once upon a time"}, {"max_tokens", 12}}, sampled},
      {"chat greedy",
       true,
       {{"messages", {{{"role", "system"}, {"content", "Be brief."}}, user("Name a colour.")}},
        {"max_tokens", 10}},
       {}},
      {"chat seeded sampling", true, {{"messages", {user("Tell me a story.")}}, {"max_tokens", 10}}, sampled},
      {"completion greedy with logit_bias", false, {{"prompt", "Hello, epd!"}, {"max_tokens", 12}}, biased},
      {"completion greedy with penalties",
       false,
       {{"prompt", penalty_prompt}, {"max_tokens", 24}},
       penalized},
      {"chat seeded sampling with penalties",
       true,
       {{"messages", {user("Tell me a story.")}}, {"max_tokens", 24}},
       sampled_penalized},
      {"chat with a PNG image", true, {{"messages", {image_message}}, {"max_tokens", 8}}, {}, true},
      {"completion with a multi-byte character in its answer",
       false,
       {{"prompt", multibyte_prompt(16)}, {"max_tokens", 16}},
       {}},
      // n choices, each equal to a single request with seed + its index.
      {"chat n = 8 seeded sampling",
       true,
       {{"messages", {user("Tell me a story.")}}, {"max_tokens", 6}},
       sampled,
       false,
       8},
      {"completion n = 3 with penalties",
       false,
       {{"prompt", penalty_prompt}, {"max_tokens", 10}},
       sampled_penalized,
       false,
       3},
      {"chat n = 3 with a PNG image", true, {{"messages", {image_message}}, {"max_tokens", 8}}, hot, true, 3},
  };
  const auto r = run_node("generate.mjs", cluster, make_spec(cases));
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find(" 0 failed") != std::string::npos);
  INFO(cluster.logs());
  CHECK(cluster.wait_all_free().size() == 4);
}

namespace sdk_logprobs {

struct LogprobsCase {
  std::string name;
  bool chat;
  json params;  // prompt or messages, max_tokens, and the endpoint's logprobs fields
  Sampling sampling;
  int top = 0;  // alternatives the fields ask for
  bool image = false;
  int n = 1;
};

// Each case with epd-run's tokens and log-probabilities for every choice (seed + i), as logprobs.mjs reads.
json make_spec(const std::vector<LogprobsCase>& cases) {
  json spec = {{"cases", json::array()}};
  for (const auto& c : cases) {
    json params = c.params;
    params.update(sampling_body(c.sampling));
    if (c.n > 1) params["n"] = c.n;
    const std::string prompt = c.chat ? chat_prompt(params["messages"]) : params["prompt"].get<std::string>();
    json one = {{"name", c.name},
                {"endpoint", c.chat ? "chat" : "completions"},
                {"params", params},
                {"top", c.top},
                {"greedy", c.sampling.temperature == 0},
                {"expect_choices", json::array()},
                {"expect_logprobs", json::array()}};
    for (int i = 0; i < c.n; ++i) {
      Sampling s = c.sampling;
      if (i > 0) s.seed = s.seed.value_or(0) + uint64_t(i);
      s.logprobs = c.top;
      const auto ref = reference(prompt, params["max_tokens"], c.image ? kPpm : "", s);
      INFO(c.name);
      REQUIRE(ref.logprobs.size() == ref.tokens.size());
      one["expect_choices"].push_back(ref.tokens);
      one["expect_logprobs"].push_back(ref.logprobs);
    }
    spec["cases"].push_back(std::move(one));
  }
  return spec;
}

}  // namespace sdk_logprobs

TEST_CASE("OpenAI SDK: logprobs and top_logprobs equal epd-run's for every token including the first",
          "[e2e][multiproc][openai][logprobs]") {
  require_node_sdk();
  Cluster cluster(ClusterSpec{});
  cluster.start();
  Sampling sampled;
  sampled.temperature = 0.9;
  sampled.top_k = 50;
  sampled.seed = 77;
  Sampling shaped = sampled;  // the logprobs are those after the bias and the penalties
  shaped.logit_bias = {{uint32_t('e'), -100.0}, {uint32_t('a'), 3.0}};
  shaped.presence_penalty = 0.7;
  shaped.repetition_penalty = 1.4;
  const json image_message =
      user(json::array({{{"type", "image_url"}, {"image_url", {{"url", "@file:" + kPng}}}},
                        {{"type", "text"}, {"text", "What is it?"}}}));
  using sdk_logprobs::LogprobsCase;
  const std::vector<LogprobsCase> cases = {
      {"chat greedy, top_logprobs 5",
       true,
       {{"messages", {user("Name a colour.")}}, {"max_tokens", 12}, {"logprobs", true}, {"top_logprobs", 5}},
       {},
       5},
      {"chat sampled, logprobs without alternatives",
       true,
       {{"messages", {user("Tell me a story.")}}, {"max_tokens", 10}, {"logprobs", true}},
       sampled,
       0},
      {"completion sampled with bias and penalties, logprobs 3",
       false,
       {{"prompt", "Say it again #0"}, {"max_tokens", 16}, {"logprobs", 3}},
       shaped,
       3},
      {"completion greedy, logprobs 5",
       false,
       {{"prompt", "Hello, epd!"}, {"max_tokens", 12}, {"logprobs", 5}},
       {},
       5},
      {"chat with a PNG image, top_logprobs 20",
       true,
       {{"messages", {image_message}}, {"max_tokens", 8}, {"logprobs", true}, {"top_logprobs", 20}},
       {},
       20,
       true},
      {"chat n = 3 sampled, llama-server's n_probs 4",
       true,
       {{"messages", {user("Tell me a story.")}}, {"max_tokens", 8}, {"n_probs", 4}},
       sampled,
       4,
       false,
       3},
  };
  const auto r = run_node("logprobs.mjs", cluster, sdk_logprobs::make_spec(cases));
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find(" 0 failed") != std::string::npos);
  INFO(cluster.logs());
  CHECK(cluster.wait_all_free().size() == 4);
}

TEST_CASE("OpenAI SDK: errors are typed, X-Request-Id is echoed", "[e2e][multiproc][openai]") {
  require_node_sdk();
  Cluster cluster(ClusterSpec{});
  cluster.start();
  const auto r = run_node("errors.mjs", cluster, json::object());
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find(" 0 failed") != std::string::npos);
}

TEST_CASE("OpenAI SDK: over TLS with an API key, and refused without the key", "[e2e][multiproc][openai]") {
  require_node_sdk();
  ClusterSpec spec;
  spec.tls = true;
  spec.api_key = "sk-e2e-0123456789abcdef";
  Cluster cluster(spec);
  cluster.start();  // its readiness probe already went through TLS with the key
  const std::vector<SpecCase> cases = {
      {"completion greedy", false, {{"prompt", "Hello, epd!"}, {"max_tokens", 8}}, {}},
      {"chat greedy", true, {{"messages", {user("Name a colour.")}}, {"max_tokens", 8}}, {}},
  };
  const std::string ca = "NODE_EXTRA_CA_CERTS=" + cluster.ca_file().string();
  const auto ok = run_node("generate.mjs", cluster, make_spec(cases), {ca, "OPENAI_API_KEY=" + spec.api_key});
  INFO(ok.output);
  CHECK(ok.exit_code == 0);
  CHECK(ok.output.find(" 0 failed") != std::string::npos);

  const auto wrong = run_node("generate.mjs", cluster, make_spec({cases[0]}),
                              {ca, "OPENAI_API_KEY=sk-wrong-key-0123456789"});
  INFO(wrong.output);
  CHECK(wrong.exit_code != 0);
  CHECK(wrong.output.find("401") != std::string::npos);

  // Without the CA the SDK cannot verify the router's certificate.
  const auto untrusted =
      run_node("generate.mjs", cluster, make_spec({cases[0]}), {"OPENAI_API_KEY=" + spec.api_key});
  INFO(untrusted.output);
  CHECK(untrusted.exit_code != 0);

  const auto raw = run_command({"curl", "-sS", "--max-time", "5", "--cacert", cluster.ca_file().string(),
                                cluster.base_url() + "/v1/models"});
  INFO(raw.output);
  CHECK(raw.output.find("invalid_api_key") != std::string::npos);  // curl sent no key
}
