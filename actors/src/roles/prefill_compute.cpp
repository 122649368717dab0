#include "roles/prefill_compute.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "epd/actors/caf_types.hpp"
#include "epd/actors/role_support.hpp"
#include "epd/model/chunk_grid.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/mmproj.hpp"
#include "roles/room_grammar.hpp"

namespace epd::actors {
namespace {

// A job in the queue and how far it got.
struct Running {
  PrefillJob job;
  uint32_t begin = 0;  // next chunk starts here
  uint32_t index = 0;  // next chunk's number
};

struct ComputeState {
  model::KvPool pool;
  caf::actor role;
  std::unique_ptr<model::ModelRunner> runner;
  std::deque<Running> queue;  // first come, first computed: the front job runs to its end
  bool stepping = false;      // a step message is queued
  std::chrono::milliseconds chunk_delay{0};
  std::unique_ptr<RoomGrammars> grammars;  // with the runner
  static inline const char* name = "prefill-compute";
};

void schedule(caf::stateful_actor<ComputeState>* self) {
  auto& s = self->state;
  if (s.stepping || s.queue.empty()) return;
  s.stepping = true;
  if (s.chunk_delay.count() > 0)
    self->delayed_send(self, s.chunk_delay, step_atom::value);
  else
    self->send(self, step_atom::value);  // behind whatever already arrived (a drop, another job)
}

// Computes the next chunk of the front job and reports it.
void step(caf::stateful_actor<ComputeState>* self) {
  auto& s = self->state;
  s.stepping = false;
  if (s.queue.empty()) return;
  Running& run = s.queue.front();
  const PrefillJob& job = run.job;
  const auto& cfg = s.runner->config();
  const uint32_t n = uint32_t(job.prompt.size());
  // On the grid of chunk_tokens from position 0, whatever the cached prefix: a checkpoint's bits depend on
  // the chunking, and the colocated run's chunks start at 0 (epd/model/chunk_grid.hpp).
  const model::ChunkGrid grid(cfg, job.chunk_tokens);
  const model::ChunkGrid::Piece piece = grid.next_piece(run.begin, job.prompt, job.first_index);
  const uint32_t end = piece.end;
  ChunkComputed c;
  c.room = job.room;
  c.chunk = run.index;
  c.end = end;
  const auto t0 = std::chrono::steady_clock::now();
  if (n == 0) {
    c.ok = false;
    c.error = protocol::make_error(protocol::ErrorCode::invalid_request, "empty prompt");
  } else {
    std::span<const float> emb(job.embeddings, job.embedding_floats);
    model::PrefillChunk draw;
    draw.sampling = job.sampling;
    draw.generated = job.first_index;
    draw.logprobs = &c.first_logprobs;  // only the last piece's draw counts
    if (cfg.mrope) draw.positions = &job.positions;
    // The first token's draw follows the grammar, from the state after a resumed answer's tokens.
    protocol::Result<std::unique_ptr<model::Grammar>> grammar = std::unique_ptr<model::Grammar>{};
    if (end == n && !job.grammar.empty()) {
      const uint32_t answer = std::min(job.first_index, n);
      grammar = s.grammars->state(job.grammar, std::span<const uint32_t>(job.prompt).last(answer));
      if (grammar) draw.constraint = grammar->get();
    }
    auto r = grammar ? model::compute_piece(*s.runner, s.pool, job.pages, piece, job.prompt, emb, draw)
                     : protocol::Result<model::TokenId>(grammar.error());
    if (!r) {
      c.ok = false;
      c.error = r.error();
    } else if (end == n) {
      c.first_token = *r;
    }
  }
  c.compute_us = micros_since(t0);
  c.last = end == n || !c.ok;
  const bool last = c.last;
  self->send(s.role, std::move(c));
  if (last) {
    s.queue.pop_front();
  } else {
    run.begin = end;
    ++run.index;
  }
  schedule(self);
}

caf::behavior prefill_compute(caf::stateful_actor<ComputeState>* self, model::ModelConfig model,
                              model::KvPool pool, caf::actor role, std::chrono::milliseconds chunk_delay) {
  harden(self, "prefill-compute");
  auto& st = self->state;
  st.pool = pool;
  st.chunk_delay = chunk_delay;
  st.role = std::move(role);
  auto runner = model::make_runner(model);
  if (!runner) {
    spdlog::critical("prefill-compute: cannot build the model: {}", runner.error().to_string());
    self->quit(caf::exit_reason::user_shutdown);
    return {};
  }
  st.runner = std::move(runner.value());
  st.grammars = std::make_unique<RoomGrammars>(model);
  return {
      [=](PrefillJob& job) {
        const uint32_t start = job.start;
        self->state.queue.push_back(Running{std::move(job), start, 0});
        schedule(self);
      },
      [=](step_atom) { step(self); },
      [=](PrefillDrop drop) {
        auto& q = self->state.queue;
        auto it = std::find_if(q.begin(), q.end(), [&](const Running& r) { return r.job.room == drop.room; });
        if (it == q.end()) return;  // done already: its last chunk is on its way
        ChunkComputed c;
        c.room = drop.room;
        c.chunk = it->index;
        c.end = it->begin;
        c.last = true;
        c.ok = false;
        c.error = protocol::make_error(protocol::ErrorCode::aborted, "room ended during prefill");
        self->send(self->state.role, std::move(c));
        q.erase(it);
      },
  };
}

}  // namespace

caf::actor spawn_prefill_compute(caf::actor_system& system, bool detached, model::ModelConfig model,
                                 model::KvPool pool, caf::actor role, std::chrono::milliseconds chunk_delay) {
  return spawn_worker_actor(system, detached, prefill_compute, std::move(model), pool, std::move(role),
                            chunk_delay);
}

}  // namespace epd::actors
