// epd-bench serve --turns: what a conversation sends (the whole history, the answers as they came back) and
// the context check that refuses conversations the model cannot hold.
#include <algorithm>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "serve_conversation.hpp"

using namespace epd::bench;
using nlohmann::json;

namespace {

WorkloadOptions chat_options(int turns) {
  WorkloadOptions o;
  o.model = "m";
  o.turns = turns;
  o.prompt = {24, 0.5};
  o.output = {8, 0};
  return o;
}

}  // namespace

TEST_CASE(
    "a conversation's turn k carries the system prompt and every earlier user turn and the k-1 answers as "
    "given",
    "[bench][serve]") {
  const auto o = chat_options(4);
  Conversation c(o, "SYSTEM", 3);
  std::vector<std::string> users;
  // Answers with characters JSON escapes and a non-ASCII one: they must come back byte for byte.
  const std::vector<std::string> answers = {"first \"answer\"", "second\\n \xc3\xa9", "third"};
  for (int k = 0; k < 4; ++k) {
    REQUIRE_FALSE(c.done());
    const auto plan = c.next_turn();
    CHECK(c.turns_sent() == k + 1);
    const auto body = json::parse(plan.body);
    CHECK(body["max_tokens"] == plan.max_tokens);
    CHECK(body["stream"] == true);
    const auto& m = body["messages"];
    REQUIRE(m.size() == size_t(2 + 2 * k));
    CHECK(m[0] == json({{"role", "system"}, {"content", "SYSTEM"}}));
    for (int j = 0; j < k; ++j) {
      CHECK(m[1 + 2 * j] == json({{"role", "user"}, {"content", users[size_t(j)]}}));
      CHECK(m[2 + 2 * j] == json({{"role", "assistant"}, {"content", answers[size_t(j)]}}));
    }
    const auto& last = m.back();
    CHECK(last["role"] == "user");
    const std::string text = last["content"];
    CHECK(int(text.size()) == plan.prompt_chars);
    CHECK(std::find(users.begin(), users.end(), text) == users.end());  // a new message each turn
    users.push_back(text);
    if (k < 3) c.answered(answers[size_t(k)]);
  }
  CHECK(c.done());

  // The same conversation index sends the same words, whatever else the run did before it.
  Conversation again(o, "SYSTEM", 3), other(o, "SYSTEM", 4);
  const auto first = json::parse(again.next_turn().body)["messages"][1]["content"];
  CHECK(first == users[0]);
  CHECK(json::parse(other.next_turn().body)["messages"][1]["content"] != users[0]);
}

TEST_CASE("completions conversations resend the prompt so far with the answers appended", "[bench][serve]") {
  auto o = chat_options(3);
  o.chat = false;
  o.stream = false;
  Conversation c(o, "SYS:", 0);
  const auto p1 = json::parse(c.next_turn().body);
  const std::string prompt1 = p1["prompt"];
  CHECK(prompt1.rfind("SYS:", 0) == 0);
  CHECK_FALSE(p1.contains("stream"));
  c.answered(" ANSWER-1 ");
  const std::string prompt2 = json::parse(c.next_turn().body)["prompt"];
  REQUIRE(prompt2.size() > prompt1.size() + 10);
  CHECK(prompt2.substr(0, prompt1.size() + 10) == prompt1 + " ANSWER-1 ");
}

TEST_CASE(
    "the context check refuses conversations that cannot fit max_seq and finds the user length that does",
    "[bench][serve]") {
  auto o = chat_options(4);
  o.system_chars = 60;
  o.prompt = {64, 0};
  o.output = {16, 0};
  // 1 BOS, then the system prompt, 4 user turns and 3 answers, and the last answer with its header, each
  // message with the template's tokens.
  const int k = kTemplateTokens;
  CHECK(conversation_token_bound(o) == 1 + (60 + k) + 4 * (64 + k) + 3 * (16 + k) + (k + 16));
  const std::string refused = check_context(o, 256);
  CHECK(refused.find("more than the model's max_seq 256") != std::string::npos);
  CHECK(refused.find("user messages of at most ") != std::string::npos);

  const int fits = fitting_user_chars(o, 256, 64);
  REQUIRE(fits > 0);
  o.prompt.mean = fits;
  CHECK(conversation_token_bound(o) <= 256);
  CHECK(check_context(o, 256).empty());
  o.prompt.mean = fits + 1;
  CHECK(conversation_token_bound(o) > 256);

  // The spread counts at its top: +50% of 20 chars is 30.
  o.prompt = {20, 0.5};
  const int with_spread = conversation_token_bound(o);
  o.prompt = {30, 0};
  CHECK(conversation_token_bound(o) == with_spread);

  // Nothing fits: say what would.
  o.turns = 40;
  CHECK(fitting_user_chars(o, 256, 64) == 0);
  CHECK(check_context(o, 256).find("Fewer --turns") != std::string::npos);
}
