#include "epd/actors/role_support.hpp"

#include <spdlog/spdlog.h>

#include <sched.h>

#include <algorithm>
#include <cmath>

#include "epd/model/kv_cache.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/mmproj.hpp"

namespace epd::actors {

// The cores this process may run on (its affinity mask), at most 256.
uint32_t available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  return uint32_t(std::clamp(n, 1, 256));
}

protocol::Result<model::ModelConfig> model_for(const config::ClusterConfig& cfg) {
  if (cfg.model.path.empty()) return model::preset(cfg.model.preset);
  auto m = model::load_model_path(cfg.model.path.string());
  if (!m) return m;
  m->threads = cfg.model.threads ? cfg.model.threads : available_cores();
  return model::with_mmproj(std::move(*m), cfg.model.mmproj.string());
}

protocol::Result<protocol::KvLayout> kv_layout_setting(const config::Settings& s, const model::ModelConfig& m,
                                                       uint32_t num_pages) {
  auto page_size = s.get_uint("kv_page_size", m.page_size, 1, model::kMaxPageSize);
  if (!page_size) return page_size.error();
  auto dtype_name = s.get_string("kv_dtype", "f16");
  if (!dtype_name) return dtype_name.error();
  auto dtype = model::parse_dtype(*dtype_name);
  if (!dtype)
    return protocol::make_error(protocol::ErrorCode::config_error, "kv_dtype: " + dtype.error().detail);
  auto order_name = s.get_string("kv_order", "token_head_dim");
  if (!order_name) return order_name.error();
  auto order = model::parse_dim_order(*order_name);
  if (!order)
    return protocol::make_error(protocol::ErrorCode::config_error, "kv_order: " + order.error().detail);
  protocol::KvLayout layout = model::kv_layout_for(m, num_pages, *dtype, *order, uint32_t(*page_size));
  if (!s.has("kv_memory_mb")) return layout;
  // A budget: as many whole pages (every layer's K and V of page_size tokens) as it holds.
  if (s.has("kv_pages"))
    return protocol::make_error(protocol::ErrorCode::config_error,
                                "kv_pages and kv_memory_mb both set: give the pool as pages or as memory");
  auto mib = s.get_uint("kv_memory_mb", 0, 1, uint64_t{1} << 30);
  if (!mib) return mib.error();
  const uint64_t page = layout.page_bytes() * layout.layers * 2, pages = (*mib << 20) / page;
  if (pages == 0 || pages > kMaxKvPages)
    return protocol::make_error(protocol::ErrorCode::config_error,
                                "kv_memory_mb = " + std::to_string(*mib) + " holds " + std::to_string(pages) +
                                    " KV pages of " + std::to_string(page) + " bytes (" +
                                    describe_layout(layout) + "); the pool takes 1.." +
                                    std::to_string(kMaxKvPages));
  layout.num_pages = static_cast<uint32_t>(pages);
  return layout;
}

std::string describe_layout(const protocol::KvLayout& l) {
  return std::to_string(l.page_size) + "-token pages, " + std::string(model::dtype_name(l.dtype)) + ", " +
         std::string(model::dim_order_name(l.order));
}

const protocol::RegionDesc* find_region(const protocol::SegmentDescriptor& seg, std::string_view name) {
  for (const auto& r : seg.regions)
    if (r.name == name) return &r;
  return nullptr;
}

const transport::Region* find_local_region(const transport::Engine& engine, std::string_view name) {
  for (const auto& r : engine.regions())
    if (r.name == name) return engine.find_local(r.addr(), r.length);
  return nullptr;
}

protocol::RoomResult failure_result(uint64_t room, const protocol::Error& error) {
  protocol::RoomResult r;
  r.room = room;
  r.ok = false;
  r.code = error.code;
  r.reason = error.detail.empty() ? std::string(protocol::error_name(error.code)) : error.detail;
  return r;
}

protocol::Result<model::PromptPositions> positions_of(const model::ModelConfig& model,
                                                      const protocol::Submit& s) {
  if (!model.mrope) {
    if (s.image_grids.empty()) return model::PromptPositions{};
    return protocol::make_error(protocol::ErrorCode::invalid_request,
                                "SUBMIT: image_grids for model " + model.name + ", which has no M-RoPE");
  }
  if (s.image_grids.size() % 2 != 0)
    return protocol::make_error(protocol::ErrorCode::invalid_request,
                                "SUBMIT: image_grids holds " + std::to_string(s.image_grids.size()) +
                                    " numbers, not (columns, rows) pairs");
  std::vector<model::ImageGrid> grids;
  for (size_t i = 0; i < s.image_grids.size(); i += 2)
    grids.push_back(model::ImageGrid{s.image_grids[i], s.image_grids[i + 1]});
  return model::PromptPositions::make(s.prompt, model::image_token(model).value_or(model::kImage), grids);
}

model::SamplingParams sampling_of(const protocol::Submit& s) {
  model::SamplingParams p{s.temperature, s.top_p, s.top_k, s.seed, s.min_p, {}};
  p.presence_penalty = s.presence_penalty;
  p.frequency_penalty = s.frequency_penalty;
  p.repetition_penalty = s.repetition_penalty;
  p.logprobs = s.logprobs;
  p.top_logprobs = s.top_logprobs;
  // Unequal lists take no bias at all; validate() then refuses the room (a NaN bias).
  if (s.logit_bias_ids.size() != s.logit_bias_values.size()) {
    p.logit_bias.emplace_back(0, NAN);
    return p;
  }
  for (size_t i = 0; i < s.logit_bias_ids.size(); ++i)
    p.logit_bias.emplace_back(s.logit_bias_ids[i], s.logit_bias_values[i]);
  return p;
}

void set_sampling(protocol::Submit& s, const model::SamplingParams& p) {
  s.temperature = p.temperature;
  s.top_p = p.top_p;
  s.top_k = p.top_k;
  s.seed = p.seed;
  s.min_p = p.min_p;
  s.presence_penalty = p.presence_penalty;
  s.frequency_penalty = p.frequency_penalty;
  s.repetition_penalty = p.repetition_penalty;
  s.logprobs = p.logprobs;
  s.top_logprobs = p.top_logprobs;
  s.logit_bias_ids.clear();
  s.logit_bias_values.clear();
  for (const auto& [id, bias] : p.logit_bias) {
    s.logit_bias_ids.push_back(id);
    s.logit_bias_values.push_back(bias);
  }
}

void report_failure(Bridge& bridge, const std::string& router, uint64_t room, const protocol::Error& error) {
  bridge.send(router, failure_result(room, error));
}

void harden(caf::scheduled_actor* self, const std::string& name) {
  self->set_default_handler([name](caf::scheduled_actor*, caf::message_view& x) -> caf::result<caf::message> {
    spdlog::warn("{}: dropped an unexpected message {}", name, caf::to_string(x.copy_content_to_message()));
    return caf::message{};
  });
  self->set_error_handler([name](caf::scheduled_actor*, caf::error& e) {
    spdlog::warn("{}: error message: {}", name, caf::to_string(e));
  });
}

uint64_t micros_since(std::chrono::steady_clock::time_point t0) {
  return uint64_t(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count());
}

void publish_prefix_cache(LoadGauge& load, const PrefixCache& cache) {
  load.cached_kv_pages = cache.pages();
  load.prefix_hit_tokens = cache.stats()->hit_tokens.load();
  load.prefix_missed_tokens = cache.stats()->missed_tokens.load();
}

}  // namespace epd::actors
