#include "epd/actors/process_metrics.hpp"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>

#include "epd/metrics/buckets.hpp"

namespace epd::actors {
namespace {

using metrics::Snapshot;

double now_unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The process's resident set now and at its peak (VmRSS, VmHWM of /proc/self/status, in kB): what an
// operator sizes a host by, and what the KV pool, the model's mapped file and ggml's repacked copies add up
// to. Absent (not 0) where /proc is not there to read.
void sample_memory(Snapshot& s) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    const auto kb = [&](std::string_view key) -> std::optional<double> {
      if (!line.starts_with(key)) return std::nullopt;
      return std::strtod(line.c_str() + key.size(), nullptr) * 1024.0;
    };
    if (auto v = kb("VmRSS:"))
      s.gauge("epd_process_resident_memory_bytes", "Resident memory of the process now (VmRSS)", *v);
    else if (auto p = kb("VmHWM:"))
      s.gauge("epd_process_resident_memory_peak_bytes", "Largest resident memory the process has had (VmHWM)",
              *p);
  }
}

// Figures that only mean something where the role has the resource: encoders hold no KV pages, so they
// export no KV series at all rather than a misleading 0 of 0.
void sample_load(Snapshot& s, LoadGauge& g) {
  if (const double total = g.total_kv_pages.load(); total > 0) {
    s.gauge("epd_kv_pages_free", "KV pages free (decode: its pool; prefill: its compute pages)",
            g.free_kv_pages.load());
    s.gauge("epd_kv_pages_capacity", "KV pages in all", total);
  }
  if (const double total = g.total_slots.load(); total > 0) {
    s.gauge("epd_embedding_slots_free", "Embedding slots free (encoder: sources; prefill: landing)",
            g.free_slots.load());
    s.gauge("epd_embedding_slots_capacity", "Embedding slots in all", total);
  }
  const size_t phases = g.room_phases.declared();
  if (phases == 0) return;  // a role without rooms (the router)
  s.gauge("epd_rooms_active", "Rooms this instance holds now", g.active_rooms.load());
  for (size_t i = 0; i < phases; ++i)
    s.gauge("epd_rooms", "Rooms this instance holds now, by the role's phase (docs/metrics.md)",
            g.room_phases.count(i), {{"state", g.room_phases.name(i)}});
  s.gauge("epd_quarantined_kv_pages", "KV pages of aborted rooms held until their writer certainly stopped",
          g.quarantined_pages.load());
  s.counter("epd_rooms_cancelled_total", "Live rooms ended by the router's CANCEL", g.cancelled_rooms.load());
  auto& st = g.staging;
  if (!st.active.load()) return;
  if (const double ring = st.ring_bytes.load(); ring > 0) {
    s.gauge("epd_staging_ring_capacity_bytes", "Staging ring size (decode)", ring);
    s.gauge("epd_staging_ring_used_bytes", "Staging ring bytes handed out and not yet consumed (decode)",
            st.ring_used.load());
    s.counter("epd_staging_ring_wraps_total", "Times the staging ring wrapped (decode)", st.rounds.load());
  }
  if (const double slots = st.source_slots.load(); slots > 0) {
    s.gauge("epd_staging_source_slots_free", "Prefill buffers free for chunks being staged",
            st.source_slots_free.load());
    s.gauge("epd_staging_source_slots_capacity", "Prefill buffers for chunks being staged", slots);
  }
  s.counter("epd_staging_chunks_total", "Chunks staged (prefill: written; decode: scattered)",
            st.chunks.load());
  s.counter("epd_staging_waits_total", "Chunks that waited for ring space (prefill)", st.waits.load());
  s.counter("epd_staging_watermarks_total", "WATERMARK messages sent (decode) or accepted (prefill)",
            st.watermarks.load());
  s.counter("epd_staging_rejected_total", "Staging messages refused as garbage or out of order",
            st.rejected.load());
  s.counter("epd_staging_oversized_total", "Chunks refused because they can never fit the ring",
            st.oversized.load());
}

}  // namespace

void export_embedding_cache(metrics::Registry& registry, std::shared_ptr<const EmbeddingCacheStats> stats) {
  registry.on_scrape([stats = std::move(stats)](Snapshot& s) {
    const auto& c = *stats;
    s.gauge("epd_embedding_cache_capacity_bytes", "Embedding cache bound (0: disabled)",
            double(c.capacity_bytes.load()));
    s.gauge("epd_embedding_cache_bytes", "Embedding bytes the cache holds now", double(c.bytes.load()));
    s.gauge("epd_embedding_cache_entries", "Images whose embeddings the cache holds now",
            double(c.entries.load()));
    s.counter("epd_embedding_cache_hits_total",
              "Images found in the embedding cache (encoder: not encoded; prefill: not transferred)",
              double(c.hits.load()));
    s.counter("epd_embedding_cache_misses_total", "Images looked up and not found in the embedding cache",
              double(c.misses.load()));
    s.counter("epd_embedding_cache_bytes_saved_total",
              "Embedding bytes served from the cache (encoder: not computed; prefill: not transferred)",
              double(c.bytes_saved.load()));
    s.counter("epd_embedding_cache_evictions_total", "Entries evicted to make room (least recently used)",
              double(c.evictions.load()));
    s.counter("epd_embedding_cache_refused_total",
              "Embeddings not cached: larger than the cache, or everything else pinned by rooms",
              double(c.refused.load()));
    s.counter("epd_embedding_transfers_skipped_total",
              "Embedding transfers that did not happen because prefill held the embeddings",
              double(c.transfers_skipped.load()));
  });
}

void export_prefix_cache(metrics::Registry& registry, std::shared_ptr<const PrefixCacheStats> stats) {
  registry.on_scrape([stats = std::move(stats)](Snapshot& s) {
    const auto& c = *stats;
    s.gauge("epd_prefix_cache_budget_pages", "Most KV pages the prefix cache may hold (0: disabled)",
            double(c.budget_pages.load()));
    s.gauge("epd_prefix_cache_pages", "KV pages the prefix cache holds now", double(c.pages.load()));
    s.counter("epd_prefix_cache_hit_tokens_total",
              "Prompt tokens whose KV was found in the prefix cache (not computed again)",
              double(c.hit_tokens.load()));
    s.counter("epd_prefix_cache_missed_tokens_total", "Prompt tokens looked up, not found, and computed",
              double(c.missed_tokens.load()));
    s.counter("epd_prefix_cache_inserted_pages_total", "KV pages the prefix cache took over from rooms",
              double(c.inserted_pages.load()));
    s.counter("epd_prefix_cache_kv_bytes_not_sent_total",
              "Prefill: KV bytes of prompts decode already held (its prefix cache), so not written",
              double(c.bytes_not_sent.load()));
    s.counter("epd_prefix_cache_evicted_pages_total",
              "KV pages evicted from the prefix cache (least recently used, unreferenced)",
              double(c.evicted_pages.load()));
  });
}

metrics::RegistryPtr make_process_metrics(const std::string& instance_id, const std::string& role) {
  return std::make_shared<metrics::Registry>(metrics::Labels{{"instance_id", instance_id}, {"role", role}});
}

void export_load(metrics::Registry& registry, std::shared_ptr<LoadGauge> load, uint64_t incarnation,
                 const transport::Engine* engine) {
  const double started = now_unix_seconds();
  registry.on_scrape([load = std::move(load), incarnation, started, engine](Snapshot& s) {
    s.gauge("epd_info", "1 for the running process; its incarnation as a label", 1,
            {{"incarnation", std::to_string(incarnation)}});
    s.gauge("epd_process_start_time_seconds", "When the process started (unix seconds)", started);
    s.gauge("epd_healthy", "1 while the instance reports itself healthy", load->healthy.load() ? 1 : 0);
    sample_memory(s);
    sample_load(s, *load);
    if (engine)
      s.counter("epd_fenced_writes_total",
                "Writes refused because their room's grant was revoked (stale writers)",
                double(engine->fence_stats().refused));
  });
}

TransferMetrics::TransferMetrics(metrics::Registry& registry, std::shared_ptr<LoadGauge> load)
    : duration_(registry.histogram("epd_transfer_duration_seconds",
                                   "Transfer jobs delivered: first byte posted to last byte acknowledged")),
      size_(registry.histogram("epd_transfer_size_bytes", "Bytes of each transfer job delivered")),
      failures_(registry.counter("epd_transfer_failures_total",
                                 "Transfer jobs failed after their retry, by error code")) {
  if (!load) return;
  registry.on_scrape([load = std::move(load)](Snapshot& s) {
    s.counter("epd_transfer_worker_restarts_total", "Transfer workers restarted after a crash",
              load->worker_restarts.load());
    s.counter("epd_transfer_retries_total", "Transfer jobs retried once on a fresh session",
              load->transfer_retries.load());
    s.counter("epd_transfer_sessions_recycled_total", "Transfer sessions closed for a high failure rate",
              load->sessions_recycled.load());
  });
}

TransferMetrics::Series& TransferMetrics::series(const std::string& backend, const std::string& peer_role) {
  std::lock_guard lock(mu_);
  for (auto& s : series_)
    if (s.backend == backend && s.peer_role == peer_role) return s;
  const metrics::Labels labels{{"backend", backend}, {"peer_role", peer_role}};
  series_.push_back({backend, peer_role, &duration_.Add(labels, metrics::transfer_seconds_buckets()),
                     &size_.Add(labels, metrics::size_bytes_buckets())});
  return series_.back();
}

void TransferMetrics::delivered(const std::string& backend, const std::string& peer_role, double seconds,
                                uint64_t bytes) {
  Series& s = series(backend, peer_role);
  s.duration->Observe(seconds);
  s.size->Observe(double(bytes));
}

void TransferMetrics::failed(std::string_view code, const std::string& peer_role) {
  failures_.Add({{"code", std::string(code)}, {"peer_role", peer_role}}).Increment();
}

MembershipMetrics::MembershipMetrics(metrics::Registry& registry)
    : seen_(registry.counter("epd_peer_incarnations_seen_total",
                             "New incarnations of peers seen (a peer joined or restarted)")),
      lost_(registry.counter("epd_peers_lost_total",
                             "Peer incarnations lost: left the registry's list, or the connection broke")),
      refused_(registry.counter("epd_peers_refused_total",
                                "Peer incarnations refused as incompatible: no protocol revision in common, "
                                "or another model")),
      lists_(registry.counter(
          "epd_peer_lists_sent_total",
          "Full PEERS lists the embedded registry sent, by why: joined, asked (a gap), "
          "late (the last had not arrived), stood_still (a member held an older version)")) {}

void MembershipMetrics::incarnation_seen(const std::string& peer_role) {
  seen_.Add({{"peer_role", peer_role}}).Increment();
}

void MembershipMetrics::refused(const std::string& reason, const std::string& peer_role) {
  refused_.Add({{"reason", reason}, {"peer_role", peer_role}}).Increment();
}

void MembershipMetrics::peer_lost(const std::string& peer_role, const std::string& how) {
  lost_.Add({{"peer_role", peer_role}, {"how", how}}).Increment();
}

void MembershipMetrics::lists_sent(const std::string& why, uint64_t n) {
  lists_.Add({{"why", why}}).Increment(double(n));
}

}  // namespace epd::actors
