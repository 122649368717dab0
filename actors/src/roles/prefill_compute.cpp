#include "roles/prefill_compute.hpp"

#include <spdlog/spdlog.h>

#include "epd/actors/role_support.hpp"

namespace epd::actors {
namespace {

struct ComputeState {
  model::KvPool pool;
  caf::actor role;
  std::unique_ptr<model::ModelRunner> runner;
  static inline const char* name = "prefill-compute";
};

caf::behavior prefill_compute(caf::stateful_actor<ComputeState>* self, model::ModelConfig model,
                              model::KvPool pool, caf::actor role) {
  harden(self, "prefill-compute");
  auto& st = self->state;
  st.pool = pool;
  st.role = std::move(role);
  auto runner = model::make_reference_runner(model);
  if (!runner) {
    spdlog::critical("prefill-compute: cannot build the model: {}", runner.error().to_string());
    self->quit(caf::exit_reason::user_shutdown);
    return {};
  }
  st.runner = std::move(runner.value());
  return {
      [=](PrefillJob& job) {
        auto& s = self->state;
        const auto& cfg = s.runner->config();
        const uint32_t n = uint32_t(job.prompt.size());
        const uint32_t chunk = std::max<uint32_t>(1, job.chunk_tokens);
        std::span<const float> emb(job.embeddings, job.embedding_floats);
        uint32_t index = 0;
        for (uint32_t begin = 0; begin < n; begin += chunk, ++index) {
          const uint32_t end = std::min(n, begin + chunk);
          const auto t0 = std::chrono::steady_clock::now();
          auto r = s.runner->prefill_chunk(s.pool, job.pages, begin,
                                           model::slice_prompt(job.prompt, emb, cfg.d_model, begin, end));
          ChunkComputed c;
          c.room = job.room;
          c.chunk = index;
          c.end = end;
          c.compute_us = micros_since(t0);
          c.last = end == n || !r;
          if (!r) {
            c.ok = false;
            c.error = r.error();
          } else if (c.last) {
            c.first_token = *r;
          }
          self->send(s.role, std::move(c));
          if (!r) break;
        }
      },
  };
}

}  // namespace

caf::actor spawn_prefill_compute(caf::actor_system& system, bool detached, model::ModelConfig model,
                                 model::KvPool pool, caf::actor role) {
  return spawn_worker_actor(system, detached, prefill_compute, std::move(model), pool, std::move(role));
}

}  // namespace epd::actors
