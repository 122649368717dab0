#include "serve_conversation.hpp"

#include <cmath>

namespace epd::bench {

Conversation::Conversation(const WorkloadOptions& o, std::string system, uint64_t index)
    : o_(o),
      index_(index),
      rng_(o.seed ^ (0xc0ffee00ull + index * 0x9e3779b97f4a7c15ull)),
      system_(std::move(system)) {
  if (o_.chat && !system_.empty()) messages_.push_back({{"role", "system"}, {"content", system_}});
  prompt_ = system_;
}

RequestPlan Conversation::next_turn() {
  RequestPlan p;
  p.prompt_chars = o_.prompt.sample(rng_);
  p.max_tokens = o_.output.sample(rng_);
  // A picture is talked about from the first turn on; later turns resend it with the history.
  p.image = sent_ == 0 && !o_.image_uri.empty() &&
            std::uniform_real_distribution<double>(0, 1)(rng_) < o_.image_fraction;
  const std::string text = workload::printable_text(size_t(p.prompt_chars), rng_);
  const uint64_t request = index_ * uint64_t(std::max(1, o_.turns)) + uint64_t(sent_);
  ++sent_;
  if (!o_.chat) {
    prompt_ += text;
    p.body = workload::request_body(o_, prompt_, p.max_tokens, request);
    return p;
  }
  nlohmann::json content = text;
  if (p.image)
    content = nlohmann::json::array({{{"type", "image_url"}, {"image_url", {{"url", o_.image_uri}}}},
                                     {{"type", "text"}, {"text", text}}});
  messages_.push_back({{"role", "user"}, {"content", std::move(content)}});
  p.body = workload::request_body(o_, messages_, p.max_tokens, request);
  return p;
}

void Conversation::answered(const std::string& text) {
  if (o_.chat)
    messages_.push_back({{"role", "assistant"}, {"content", text}});
  else
    prompt_ += text;
}

namespace conversation_budget {

// The longest a length distribution draws.
int most(const LengthDist& d) {
  return d.range <= 0 ? std::max(1, d.mean) : std::max(1, int(std::lround(d.mean * (1 + d.range))));
}

}  // namespace conversation_budget

int conversation_token_bound(const WorkloadOptions& o) {
  using conversation_budget::most;
  const int turns = std::max(1, o.turns), user = most(o.prompt), answer = most(o.output);
  const int per_message = o.chat ? kTemplateTokens : 0;
  int tokens = 1;  // a BOS token
  if (o.system_chars > 0) tokens += o.system_chars + per_message;
  tokens += turns * (user + per_message) + (turns - 1) * (answer + per_message);
  return tokens + per_message + answer;  // the last answer's header and the answer
}

int fitting_user_chars(WorkloadOptions o, uint32_t max_seq, int cap) {
  int best = 0;
  for (int chars = 1; chars <= cap; ++chars) {
    o.prompt.mean = chars;
    if (conversation_token_bound(o) > int(max_seq)) break;
    best = chars;
  }
  return best;
}

std::string check_context(const WorkloadOptions& o, uint32_t max_seq) {
  const int bound = conversation_token_bound(o);
  if (bound <= int(max_seq)) return "";
  std::string what = std::to_string(std::max(1, o.turns)) + " turns";
  if (o.system_chars > 0) what += " after a " + std::to_string(o.system_chars) + "-char system prompt";
  what += ", user messages of " + std::to_string(o.prompt.mean) + " chars";
  if (o.prompt.range > 0) what += " (up to +" + std::to_string(int(o.prompt.range * 100)) + "%)";
  what += " and answers of up to " + std::to_string(o.output.mean) + " tokens";
  if (o.output.range > 0) what += " (+" + std::to_string(int(o.output.range * 100)) + "%)";
  std::string msg = what + " can take " + std::to_string(bound) +
                    " tokens by the last turn (counting a char as a token and " +
                    std::to_string(o.chat ? kTemplateTokens : 0) +
                    " per message for the chat template), more than the model's max_seq " +
                    std::to_string(max_seq) + ". ";
  if (const int fits = fitting_user_chars(o, max_seq, 1 << 20); fits > 0)
    msg += "With these other settings, user messages of at most " + std::to_string(fits) + " chars fit";
  else
    msg += "Fewer --turns, a shorter --system-len or a smaller --output-len would fit";
  return msg;
}

}  // namespace epd::bench
