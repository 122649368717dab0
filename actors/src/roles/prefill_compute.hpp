#pragma once
// Prefill's compute actor (detached: prefill is blocking CPU work). Runs rooms' prompts chunk by chunk into
// local KV pages and reports each chunk as soon as it is computed, so the role can ship its pages while the
// next chunk computes. One pass per message takes the oldest job's next chunk and the next chunks of the
// jobs behind it, up to batch_tokens in all, in one forward pass (ModelRunner::prefill_batch: each chunk
// gets the bits it gets alone), so a short prompt is not held back by a long one before it; a PrefillDrop
// that arrives mid-prompt stops the room before its next chunk.
#include <caf/all.hpp>
#include <deque>
#include <string>
#include <vector>

#include "epd/model/runner.hpp"

namespace epd::actors {

struct PrefillJob {
  uint64_t room = 0;
  std::vector<uint32_t> prompt;
  const float* embeddings = nullptr;  // rows for the prompt's IMAGE tokens, in order (landing slot)
  uint64_t embedding_floats = 0;
  std::vector<uint32_t> pages;  // local pool pages, logical order
  uint32_t start = 0;           // tokens [0, start) have K/V in the pages already (the prefix cache's)
  uint32_t chunk_tokens = 64;
  model::SamplingParams sampling;    // draws the first generated token
  uint32_t first_index = 0;          // its index: 0, or SUBMIT's resume_from
  protocol::GrammarSpec grammar{};   // SUBMIT's: the first token follows it (after a resumed answer's)
  model::PromptPositions positions;  // where the prompt's rows rotate (an M-RoPE model's image grids)
};

// The room ended: compute no more of it. If its job is still queued or running, it ends with a last
// ChunkComputed (ok = false, aborted), so the role knows compute reads none of its memory any more.
struct PrefillDrop {
  uint64_t room = 0;
};

struct ChunkComputed {
  uint64_t room = 0;
  uint32_t chunk = 0;
  uint32_t end = 0;  // tokens [0, end) have K/V in the local pages
  bool last = false;
  bool ok = true;
  protocol::Error error;
  uint32_t first_token = 0;               // valid when last
  model::TokenLogprobs first_logprobs{};  // first_token's, when the job's sampling asks for logprobs
  uint64_t compute_us = 0;                // the pass's (several rooms' chunks may share one)
  bool opens_pass = false;                // the first report of its pass
};

// `detached`: RoleContext::detached_workers. `batch_tokens`: the most prompt tokens a pass takes (the oldest
// job's chunk always runs). `chunk_delay` (fault injection, 0 in service): a pause before every pass, so
// tests can hold rooms on a slow prefill.
caf::actor spawn_prefill_compute(caf::actor_system& system, bool detached, model::ModelConfig model,
                                 model::KvPool pool, caf::actor role, uint32_t batch_tokens,
                                 std::chrono::milliseconds chunk_delay = std::chrono::milliseconds{0});

}  // namespace epd::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::PrefillJob)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::PrefillDrop)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::ChunkComputed)
