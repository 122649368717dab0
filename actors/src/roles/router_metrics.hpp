#pragma once
// The router's own metrics (docs/metrics.md): requests by outcome, failures and retries by error code, and
// the latencies clients see — time to first token, gaps between tokens, end to end, and each stage of the
// rooms that answered. Counted next to RouterStats (/v1/stats), at the same points of the request's life.
#include <cstdint>
#include <optional>
#include <string_view>

#include "epd/metrics/registry.hpp"
#include "epd/protocol/messages.hpp"

namespace epd::actors {

class RouterMetrics {
 public:
  explicit RouterMetrics(metrics::Registry& registry);

  // outcome: completed, failed, cancelled or rejected (429).
  void request_done(std::string_view outcome);
  void failed(std::string_view code);  // also request_done("failed")
  void retried(std::string_view code);
  void resumed(uint32_t tokens);  // a retry that goes on from `tokens` already drawn
  // A completed request: its TTFT and total as the router saw them, the stages its room reported, its
  // prompt and generated token counts.
  void completed(double ttft_seconds, double total_seconds, const protocol::RoomResult& result,
                 uint32_t prompt_tokens);
  // `count` fresh tokens arrived `gap_seconds` after the previous ones: each gets gap / count.
  void tokens_streamed(double gap_seconds, size_t count);
  // Requests in flight and queued, and the prompt backlog admission weighs (PromptBacklog).
  void occupancy(uint64_t in_flight, uint64_t queued, uint64_t backlog_tokens,
                 std::optional<double> prompt_tokens_per_s);
  // An attempt placed: its prompt, and how much of it the chosen prefill and decode were believed to hold.
  void placed_prefix(uint64_t prompt_tokens, uint32_t prefill_matched, uint32_t decode_matched);

 private:
  metrics::Family<metrics::Counter>& requests_;
  metrics::Family<metrics::Counter>& failures_;
  metrics::Family<metrics::Counter>& retries_;
  metrics::Counter& resumed_tokens_;
  metrics::Histogram& ttft_;
  metrics::Histogram& itl_;
  metrics::Histogram& e2e_;
  metrics::Family<metrics::Histogram>& stages_;
  metrics::Counter& prompt_tokens_;
  metrics::Counter& generated_tokens_;
  metrics::Counter& placed_tokens_;
  metrics::Family<metrics::Counter>& matched_;
  metrics::Counter& matched_prefill_;
  metrics::Counter& matched_decode_;
  metrics::Gauge& in_flight_;
  metrics::Gauge& queued_;
  metrics::Gauge& backlog_;
  metrics::Gauge& prompt_rate_;
};

}  // namespace epd::actors
