#include "roles/decode_loop.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <deque>

#include "epd/actors/role_support.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/prompt_codec.hpp"
#include "roles/logprobs_wire.hpp"
#include "roles/room_grammar.hpp"

namespace epd::actors {
namespace {

struct Sequence {
  DecodeJoin join;
  std::vector<uint32_t> tokens;
  std::chrono::steady_clock::time_point started;
  // With a penalty: the prompt, then every token drawn here (DecodeSeq::history); else empty.
  std::vector<uint32_t> history{};
  // With sampling.logprobs: one per token of `tokens` (TOKENS streams each, RESULT repeats them all).
  std::vector<model::TokenLogprobs> logprobs{};
  std::unique_ptr<model::Grammar> grammar{};  // with a grammar: its state after every token drawn so far
};

struct LoopState {
  BridgePtr bridge;
  DecodeLoopConfig config;
  caf::actor role;
  std::unique_ptr<model::ModelRunner> runner;
  std::shared_ptr<const model::PromptCodec> codec;  // what ends a generation; none: only max_new does
  std::deque<Sequence> active;                      // rotated each step so a full batch is fair
  std::unique_ptr<RoomGrammars> grammars;
  bool stepping = false;
  static inline const char* name = "decode-loop";
};

// The model's end-of-generation tokens end an answer (the reference model's kEos; a checkpoint's EOS and
// end-of-turn tokens), else max_new does (only it, with ignore_eos). The colocated run stops at the same
// tokens.
bool finished(const LoopState& st, const Sequence& s) {
  return s.tokens.size() >= s.join.max_new ||
         (!s.join.ignore_eos && st.codec && st.codec->ends_generation(s.tokens.back()));
}

void stream(LoopState& st, const Sequence& s) {
  protocol::Tokens t;
  t.room = s.join.room;
  t.index = s.join.first_index + uint32_t(s.tokens.size() - 1);
  t.tokens = {s.tokens.back()};
  if (s.join.sampling.logprobs) t.logprobs = to_wire({&s.logprobs.back(), 1}, s.join.sampling.top_logprobs);
  st.bridge->send(s.join.router, std::move(t));
}

void finish(caf::event_based_actor* self, LoopState& st, Sequence& s, bool ok, protocol::Error error = {}) {
  DecodeFinished f{s.join.room,          ok, std::move(error), std::move(s.tokens), micros_since(s.started),
                   std::move(s.logprobs)};
  self->send(st.role, std::move(f));
}

void step(caf::event_based_actor* self, LoopState& st) {
  st.stepping = false;
  if (st.active.empty()) return;
  const size_t n = std::min<size_t>(st.active.size(), st.config.max_batch);
  std::vector<model::DecodeSeq> batch(n);
  std::vector<model::TokenId> next(n);
  // Only a batch where some sequence asks for logprobs computes any (each costs a pass over the vocabulary).
  std::vector<model::TokenLogprobs> logprobs;
  for (size_t i = 0; i < n; ++i)
    if (st.active[i].join.sampling.logprobs) logprobs.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const Sequence& s = st.active[i];
    batch[i].pages = s.join.pages;
    batch[i].length = s.join.prompt_len + uint32_t(s.tokens.size()) - 1;
    batch[i].last_token = s.tokens.back();
    batch[i].sampling = s.join.sampling;
    batch[i].generated = s.join.first_index + uint32_t(s.tokens.size());  // the index this step draws
    batch[i].history = s.history;
    batch[i].constraint = s.grammar.get();
    batch[i].position_lag = s.join.position_lag;
  }
  auto status = st.runner->decode_step(st.config.pool, batch, next, logprobs);
  st.config.steps->Increment();
  st.config.step_sequences->Increment(double(n));
  std::deque<Sequence> rest;
  size_t stepped = 0;  // survivors among the first n
  const bool overfull = st.active.size() > n;
  for (size_t i = 0; i < st.active.size(); ++i) {
    Sequence& s = st.active[i];
    if (i < n) {
      if (!status.ok()) {
        finish(self, st, s, false, status.error());
        continue;
      }
      s.tokens.push_back(next[i]);
      if (s.join.sampling.logprobs) s.logprobs.push_back(std::move(logprobs[i]));
      if (s.join.sampling.penalized()) s.history.push_back(next[i]);
      stream(st, s);
      if (finished(st, s)) {
        finish(self, st, s, true);
        continue;
      }
      if (s.grammar)
        if (auto ok = s.grammar->accept(next[i]); !ok) {
          finish(self, st, s, false, ok.error());
          continue;
        }
      ++stepped;
    }
    rest.push_back(std::move(s));
  }
  // Sequences that were left out of a full batch go first next time.
  if (overfull) std::rotate(rest.begin(), rest.begin() + stepped, rest.end());
  st.active = std::move(rest);
  if (!st.active.empty()) {
    st.stepping = true;
    if (st.config.step_delay.count() > 0)
      self->delayed_send(self, st.config.step_delay, step_atom::value);
    else
      self->send(self, step_atom::value);  // queued behind any joins that already arrived
  }
}

caf::behavior decode_loop(caf::stateful_actor<LoopState>* self, BridgePtr bridge, DecodeLoopConfig config,
                          caf::actor role) {
  harden(self, "decode-loop");
  auto& st = self->state;
  st.bridge = std::move(bridge);
  st.config = std::move(config);
  st.role = std::move(role);
  auto runner = model::make_runner(st.config.model);
  if (!runner) {
    spdlog::critical("decode-loop: cannot build the model: {}", runner.error().to_string());
    self->quit(caf::exit_reason::user_shutdown);
    return {};
  }
  st.runner = std::move(runner.value());
  auto codec = model::PromptCodec::for_model(st.config.model);
  if (codec)
    st.codec = std::move(*codec);
  else  // the router refuses text for it too; prompts by token ids still run, to max_new
    spdlog::warn("decode-loop: no end-of-generation tokens: {}", codec.error().to_string());
  st.grammars = std::make_unique<RoomGrammars>(st.config.model);
  return {
      [=](DecodeJoin& join) {
        auto& s = self->state;
        Sequence seq{std::move(join), {}, std::chrono::steady_clock::now()};
        seq.tokens.push_back(seq.join.first_token);
        if (seq.join.sampling.logprobs) seq.logprobs.push_back(std::move(seq.join.first_logprobs));
        // The grammar's state after the answer so far: a resumed answer's tokens (the prompt's last
        // first_index), then prefill's. An answer that ends here needs none.
        std::unique_ptr<model::Grammar> grammar;
        if (!seq.join.grammar.empty() && !finished(s, seq)) {
          const auto& p = seq.join.prompt;
          std::vector<uint32_t> answer(p.end() - std::min<size_t>(seq.join.first_index, p.size()), p.end());
          answer.push_back(seq.join.first_token);
          auto g = s.grammars->state(seq.join.grammar, answer);
          if (!g) {
            finish(self, s, seq, false, g.error());
            return;
          }
          seq.grammar = std::move(*g);
        }
        if (seq.join.sampling.penalized()) {
          seq.history = std::move(seq.join.prompt);
          seq.history.push_back(seq.join.first_token);
        }
        stream(s, seq);
        if (finished(s, seq)) {
          finish(self, s, seq, true);
          return;
        }
        s.active.push_back(std::move(seq));
        if (!s.stepping) {
          s.stepping = true;
          self->send(self, step_atom::value);
        }
      },
      [=](step_atom) { step(self, self->state); },
      [=](DecodeDrop drop) {
        auto& s = self->state;
        auto it = std::find_if(s.active.begin(), s.active.end(),
                               [&](const Sequence& q) { return q.join.room == drop.room; });
        if (it == s.active.end()) return;
        finish(self, s, *it, false, std::move(drop.reason));
        s.active.erase(it);
      },
  };
}

}  // namespace

caf::actor spawn_decode_loop(caf::actor_system& system, BridgePtr bridge, DecodeLoopConfig config,
                             caf::actor role) {
  const bool detached = config.detached;
  return spawn_worker_actor(system, detached, decode_loop, std::move(bridge), std::move(config),
                            std::move(role));
}

}  // namespace epd::actors
