#pragma once
// The metrics every role process exports (docs/metrics.md): what its LoadGauge holds, sampled when scraped;
// transfer jobs' durations, sizes and failures; membership changes. Roles add their own families to the
// same registry (the router's requests and latencies).
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "epd/actors/cache/embedding_cache.hpp"
#include "epd/actors/cache/prefix_cache.hpp"
#include "epd/actors/load_gauge.hpp"
#include "epd/metrics/registry.hpp"
#include "epd/transport/engine.hpp"

namespace epd::actors {

// A registry whose series all carry instance_id and role.
metrics::RegistryPtr make_process_metrics(const std::string& instance_id, const std::string& role);

// epd_info, and the load figures of `load` (and the write fences of `engine`, if any) as gauges and counters,
// read at every scrape.
void export_load(metrics::Registry& registry, std::shared_ptr<LoadGauge> load, uint64_t incarnation,
                 const transport::Engine* engine);

// The embedding cache's counters and size (encoder and prefill), read at every scrape.
void export_embedding_cache(metrics::Registry& registry, std::shared_ptr<const EmbeddingCacheStats> stats);

// The prefix cache's counters and size (prefill and decode), read at every scrape.
void export_prefix_cache(metrics::Registry& registry, std::shared_ptr<const PrefixCacheStats> stats);

// Transfer jobs as a worker sees them (thread-safe: observed from the transport's completion threads), and
// the pool's restart, retry and recycling counters from `load`. One per transfer pool.
class TransferMetrics {
 public:
  TransferMetrics(metrics::Registry& registry, std::shared_ptr<LoadGauge> load);
  // One job delivered: from its first byte posted to its last byte acknowledged.
  void delivered(const std::string& backend, const std::string& peer_role, double seconds, uint64_t bytes);
  // One job failed for good (after its retry), with the protocol's error code name.
  void failed(std::string_view code, const std::string& peer_role);

 private:
  struct Series {
    std::string backend, peer_role;
    metrics::Histogram* duration;
    metrics::Histogram* size;
  };
  Series& series(const std::string& backend, const std::string& peer_role);

  metrics::Family<metrics::Histogram>& duration_;
  metrics::Family<metrics::Histogram>& size_;
  metrics::Family<metrics::Counter>& failures_;
  // The few (backend, peer role) pairs seen: found without building a label map per job.
  std::mutex mu_;
  std::deque<Series> series_;  // a deque: a found entry stays put while another thread adds one
};

// Peers as membership sees them change.
class MembershipMetrics {
 public:
  explicit MembershipMetrics(metrics::Registry& registry);
  void incarnation_seen(const std::string& peer_role);                   // joined or restarted
  void peer_lost(const std::string& peer_role, const std::string& how);  // "left" or "connection"
  // A peer incarnation refused as incompatible: `reason` "protocol" or "model".
  void refused(const std::string& reason, const std::string& peer_role);
  // The embedded registry sent `n` full PEERS lists, `why`: "joined", "asked" (a gap), "late" (the last had
  // not arrived) or "stood_still" (a member held one older version).
  void lists_sent(const std::string& why, uint64_t n = 1);

 private:
  metrics::Family<metrics::Counter>& seen_;
  metrics::Family<metrics::Counter>& lost_;
  metrics::Family<metrics::Counter>& refused_;
  metrics::Family<metrics::Counter>& lists_;
};

}  // namespace epd::actors
