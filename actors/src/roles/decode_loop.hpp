#pragma once
// Decode's compute actor (detached: a decode step is blocking CPU work). Continuous batching: every step
// advances all active sequences at once (up to max_batch); rooms join and leave between steps. Each
// generated token is streamed to the router as TOKENS; a finished room is reported to the decode role.
#include <caf/all.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "epd/actors/bridge.hpp"
#include "epd/metrics/registry.hpp"
#include "epd/model/runner.hpp"

namespace epd::actors {

struct DecodeJoin {
  uint64_t room = 0;
  std::vector<uint32_t> pages;
  uint32_t prompt_len = 0;
  uint32_t first_token = 0;  // generated token `first_index` (prefill drew it); the loop draws the next ones
  uint32_t first_index = 0;  // 0, or for a resumed answer the tokens drawn before (SUBMIT's resume_from)
  uint32_t max_new = 0;      // tokens this room draws, prefill's included
  std::string router;
  model::SamplingParams sampling;
  // SUBMIT's, when a penalty reads it (sampling.penalized()) or a grammar is rebuilt from a resumed
  // answer's tokens at its end; else empty.
  std::vector<uint32_t> prompt{};
  protocol::GrammarSpec grammar{};        // SUBMIT's: every token follows it
  bool ignore_eos = false;                // SUBMIT's: only max_new ends the answer
  uint32_t position_lag = 0;              // DecodeSeq's: M-RoPE's lag of positions behind slots
  model::TokenLogprobs first_logprobs{};  // first_token's (prefill's), with sampling.logprobs
};

struct DecodeDrop {
  uint64_t room = 0;
  // What DecodeFinished says: aborted (a cancel, a lost router: nobody is told), or handed_over (the role
  // tells the router, which goes on from the tokens streamed so far).
  protocol::Error reason = protocol::make_error(protocol::ErrorCode::aborted, "room cancelled");
};

struct DecodeFinished {
  uint64_t room = 0;
  bool ok = true;
  protocol::Error error;
  std::vector<uint32_t> tokens;
  uint64_t decode_us = 0;
  std::vector<model::TokenLogprobs> logprobs{};  // one per token, with sampling.logprobs
};

struct DecodeLoopConfig {
  model::ModelConfig model;
  model::KvPool pool;
  uint32_t max_batch = 16;
  bool detached = true;                     // RoleContext::detached_workers
  std::chrono::milliseconds step_delay{0};  // fault injection: between steps (decode's step_delay_ms)
  // Decode steps, and the sequences they advanced (over steps: how full the batches are). Thread-safe.
  metrics::Counter* steps = nullptr;
  metrics::Counter* step_sequences = nullptr;
};

caf::actor spawn_decode_loop(caf::actor_system& system, BridgePtr bridge, DecodeLoopConfig config,
                             caf::actor role);

}  // namespace epd::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::DecodeJoin)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::DecodeDrop)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::DecodeFinished)
