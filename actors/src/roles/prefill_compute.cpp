#include "roles/prefill_compute.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

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
  // First come, first computed: each pass takes the front job's next chunk, then the next chunks of the
  // jobs behind it that still fit in batch_tokens.
  std::deque<Running> queue;
  uint32_t batch_tokens = 0;
  bool stepping = false;  // a step message is queued
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

// A job's part of one pass: the piece it computes, and what it reports.
struct Planned {
  Running* run;
  model::ChunkGrid::Piece piece;
  std::unique_ptr<model::Grammar> grammar;  // the first token's, when the piece ends the prompt
  ChunkComputed report;
};

// The jobs of the next pass, in queue order: the front one, then each one behind whose next piece still
// fits in batch_tokens. A resumed answer's replay (decode steps) runs in a pass of its own.
std::vector<Planned> plan_pass(ComputeState& s) {
  std::vector<Planned> pass;
  uint32_t tokens = 0;
  const auto& cfg = s.runner->config();
  for (Running& run : s.queue) {
    // On the grid of chunk_tokens from position 0, whatever the cached prefix: a checkpoint's bits depend
    // on the chunking, and the colocated run's chunks start at 0 (epd/model/chunk_grid.hpp).
    const model::ChunkGrid grid(cfg, run.job.chunk_tokens);
    const auto piece = grid.next_piece(run.begin, run.job.prompt, run.job.first_index);
    const uint32_t size = piece.end - piece.begin;
    if (!pass.empty() &&
        (piece.decode_steps || pass.front().piece.decode_steps || tokens + size > s.batch_tokens))
      continue;
    pass.push_back({&run, piece, nullptr, {}});
    tokens += size;
  }
  return pass;
}

// Everything about a planned piece but its compute: its report's header, its grammar state; false (and
// the report says why) when it cannot run.
bool prepare(ComputeState& s, Planned& p) {
  const PrefillJob& job = p.run->job;
  const uint32_t n = uint32_t(job.prompt.size());
  ChunkComputed& c = p.report;
  c.room = job.room;
  c.chunk = p.run->index;
  c.end = p.piece.end;
  if (n == 0) {
    c.ok = false;
    c.error = protocol::make_error(protocol::ErrorCode::invalid_request, "empty prompt");
    return false;
  }
  // The first token's draw follows the grammar, from the state after a resumed answer's tokens.
  if (p.piece.end == n && !job.grammar.empty()) {
    const uint32_t answer = std::min(job.first_index, n);
    auto grammar = s.grammars->state(job.grammar, std::span<const uint32_t>(job.prompt).last(answer));
    if (!grammar) {
      c.ok = false;
      c.error = grammar.error();
      return false;
    }
    p.grammar = std::move(*grammar);
  }
  return true;
}

// How piece p draws the token after it (only where it ends the prompt).
model::PrefillChunk draw_of(const model::ModelConfig& cfg, Planned& p) {
  const PrefillJob& job = p.run->job;
  model::PrefillChunk draw;
  draw.sampling = job.sampling;
  draw.generated = job.first_index;
  draw.logprobs = &p.report.first_logprobs;
  draw.constraint = p.grammar.get();
  if (cfg.mrope) draw.positions = &job.positions;
  return draw;
}

// Computes the next pass and reports each of its chunks.
void step(caf::stateful_actor<ComputeState>* self) {
  auto& s = self->state;
  s.stepping = false;
  if (s.queue.empty()) return;
  const auto& cfg = s.runner->config();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Planned> pass = plan_pass(s);
  std::vector<model::PrefillPiece> pieces;
  std::vector<Planned*> batched;
  for (Planned& p : pass) {
    if (!prepare(s, p)) continue;
    const PrefillJob& job = p.run->job;
    std::span<const float> emb(job.embeddings, job.embedding_floats);
    if (p.piece.decode_steps) {  // alone in its pass (plan_pass)
      auto r = model::compute_piece(*s.runner, s.pool, job.pages, p.piece, job.prompt, emb, draw_of(cfg, p));
      if (!r) {
        p.report.ok = false;
        p.report.error = r.error();
      } else if (p.piece.end == job.prompt.size()) {
        p.report.first_token = *r;
      }
      continue;
    }
    pieces.push_back(
        {job.pages, p.piece.begin, model::piece_chunk(cfg, p.piece, job.prompt, emb, draw_of(cfg, p))});
    batched.push_back(&p);
  }
  if (!pieces.empty()) {
    auto results = s.runner->prefill_batch(s.pool, pieces);
    for (size_t i = 0; i < batched.size(); ++i) {
      ChunkComputed& c = batched[i]->report;
      if (!results[i]) {
        c.ok = false;
        c.error = results[i].error();
      } else if (c.end == batched[i]->run->job.prompt.size()) {
        c.first_token = *results[i];
      }
    }
  }
  // Each job's report; a finished or failed job leaves the queue, the others go on from their piece's end.
  const uint64_t compute_us = micros_since(t0);
  std::set<uint64_t> done;
  for (Planned& p : pass) {
    ChunkComputed& c = p.report;
    c.compute_us = compute_us;
    c.opens_pass = &p == &pass.front();
    c.last = c.end == p.run->job.prompt.size() || !c.ok;
    if (c.last) {
      done.insert(c.room);
    } else {
      p.run->begin = c.end;
      ++p.run->index;
    }
    self->send(s.role, std::move(c));
  }
  std::erase_if(s.queue, [&](const Running& r) { return done.count(r.job.room) > 0; });
  schedule(self);
}

caf::behavior prefill_compute(caf::stateful_actor<ComputeState>* self, model::ModelConfig model,
                              model::KvPool pool, caf::actor role, uint32_t batch_tokens,
                              std::chrono::milliseconds chunk_delay) {
  harden(self, "prefill-compute");
  auto& st = self->state;
  st.pool = pool;
  st.batch_tokens = batch_tokens;
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
                                 model::KvPool pool, caf::actor role, uint32_t batch_tokens,
                                 std::chrono::milliseconds chunk_delay) {
  return spawn_worker_actor(system, detached, prefill_compute, std::move(model), pool, std::move(role),
                            batch_tokens, chunk_delay);
}

}  // namespace epd::actors
