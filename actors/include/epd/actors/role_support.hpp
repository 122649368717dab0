#pragma once
// Small helpers shared by the roles: the KV layout setting, finding a region by name, failure reports, a
// SUBMIT's sampling params.
#include <caf/all.hpp>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "epd/actors/bridge.hpp"
#include "epd/actors/cache/prefix_cache.hpp"
#include "epd/actors/load_gauge.hpp"
#include "epd/config/cluster_config.hpp"
#include "epd/config/settings.hpp"
#include "epd/model/config.hpp"
#include "epd/model/positions.hpp"
#include "epd/model/sampling.hpp"
#include "epd/protocol/kv_layout.hpp"
#include "epd/protocol/segment.hpp"
#include "epd/transport/engine.hpp"

namespace epd::actors {

// The model a cluster config names: `[model] path` (a checkpoint directory, a .gguf or a model TOML) with
// its thread count, or else the preset. Every process of the cluster and epd-bench read it the same way.
// The cores this process may run on (its affinity mask), at most 256: a model instance's compute threads
// unless [model] or the instance sets `threads`.
uint32_t available_cores();

protocol::Result<model::ModelConfig> model_for(const config::ClusterConfig& cfg);

// The KV pool layout keys prefill and decode share (docs/staging.md): kv_page_size (default: the model's),
// kv_dtype (f32 | f16 | bf16), kv_order (token_head_dim | head_token_dim), and kv_memory_mb: the pool's
// size as a memory budget, in place of the role's kv_pages (`num_pages`; both set is a config_error).
inline constexpr uint32_t kMaxKvPages = 1u << 24;  // a pool's most pages, however it is sized
inline constexpr const char* kKvLayoutSettingKeys[] = {"kv_page_size", "kv_dtype", "kv_order",
                                                       "kv_memory_mb"};
protocol::Result<protocol::KvLayout> kv_layout_setting(const config::Settings& s, const model::ModelConfig& m,
                                                       uint32_t num_pages);
// "16-token pages, f32, token_head_dim" for logs and errors.
std::string describe_layout(const protocol::KvLayout& l);

const protocol::RegionDesc* find_region(const protocol::SegmentDescriptor& seg, std::string_view name);
const transport::Region* find_local_region(const transport::Engine& engine, std::string_view name);

// Tells the router that `room` failed here, with the code and reason (the router decides whether to retry).
void report_failure(Bridge& bridge, const std::string& router, uint64_t room, const protocol::Error& error);
// The RESULT that report_failure sends.
protocol::RoomResult failure_result(uint64_t room, const protocol::Error& error);

// The sampling fields of a SUBMIT, and back (the router fills them from a request).
model::SamplingParams sampling_of(const protocol::Submit& submit);
void set_sampling(protocol::Submit& submit, const model::SamplingParams& params);

// Where the rows of a SUBMIT's prompt (its resumed answer included) rotate: for an M-RoPE model from its
// image_grids, else every position is its slot; invalid_request when the grids do not tile the prompt's
// image rows, or come for a model without M-RoPE.
protocol::Result<model::PromptPositions> positions_of(const model::ModelConfig& model,
                                                      const protocol::Submit& submit);

// Every long-lived actor calls this first: an unexpected message or an error reply is logged and dropped
// instead of CAF's defaults (print, or quit the actor), so one stray message can never stop a role.
void harden(caf::scheduled_actor* self, const std::string& name);

// Spawns a compute or transfer actor: detached (its own thread) in production, scheduled when `detached` is
// false (RoleContext::detached_workers, set by tests so the test coordinator runs it).
template <class F, class... Ts>
caf::actor spawn_worker_actor(caf::actor_system& system, bool detached, F fn, Ts&&... xs) {
  if (detached) return system.spawn<caf::detached>(fn, std::forward<Ts>(xs)...);
  return system.spawn(fn, std::forward<Ts>(xs)...);
}

uint64_t micros_since(std::chrono::steady_clock::time_point t0);

// The prefix cache's size and hit counts into the load report (/v1/instances, the dashboard).
void publish_prefix_cache(LoadGauge& load, const PrefixCache& cache);

}  // namespace epd::actors
