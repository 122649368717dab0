#pragma once
// One simulated user's chat for `epd-bench serve --turns T`: the shared system prompt (if any), then T user
// turns; each request resends the whole history, the earlier answers as the server returned them (what a
// real client does), plus a new random user message. A conversation draws from its own seed, so it sends
// the same words whatever order the runner reaches it in.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "serve_workload.hpp"

namespace epd::bench {

class Conversation {
 public:
  // The `index`-th conversation of a run; `system` is the workload's shared system prompt.
  Conversation(const WorkloadOptions& o, std::string system, uint64_t index);

  // The next turn: the history so far and a new user message. The turn before it must have been answered.
  RequestPlan next_turn();
  // The server's answer to the last turn (its content joined); it becomes part of the history.
  void answered(const std::string& text);

  uint64_t index() const { return index_; }
  int turns_sent() const { return sent_; }
  bool done() const { return sent_ >= o_.turns; }

 private:
  const WorkloadOptions& o_;
  uint64_t index_;
  std::mt19937_64 rng_;
  std::string system_;
  nlohmann::json messages_ = nlohmann::json::array();  // chat: the history
  std::string prompt_;                                 // completions: the history as one text
  int sent_ = 0;
};

// How many tokens a conversation's last turn can take, prompt and answer: a character of the random
// printable messages is at most one token (byte-level vocabularies, and BPE ones with byte fallback such as
// the demo model's), an answer resent as text at most the tokens it was generated as, and every message
// `kTemplateTokens` more for the chat template's markers and role. Images are not counted.
inline constexpr int kTemplateTokens = 6;
int conversation_token_bound(const WorkloadOptions& o);

// The longest mean user message (characters) with which every turn fits `max_seq`, at most `cap`; 0 if even
// one character does not fit.
int fitting_user_chars(WorkloadOptions o, uint32_t max_seq, int cap);

// "" if every turn of a conversation fits `max_seq`, else what does not and what would.
std::string check_context(const WorkloadOptions& o, uint32_t max_seq);

}  // namespace epd::bench
