#include "router_metrics.hpp"

#include <string>

#include "epd/metrics/buckets.hpp"

namespace epd::actors {

using metrics::latency_seconds_buckets;

RouterMetrics::RouterMetrics(metrics::Registry& r)
    : requests_(r.counter("epd_requests_total", "Generation requests answered, by outcome")),
      failures_(r.counter("epd_request_failures_total", "Requests answered with an error, by error code")),
      retries_(
          r.counter("epd_request_retries_total", "Rooms retried as a new attempt, by the failure's code")),
      resumed_tokens_(r.counter("epd_request_resumed_tokens_total",
                                "Tokens retried rooms did not draw again: they went on from them")
                          .Add({})),
      ttft_(r.histogram("epd_time_to_first_token_seconds", "Arrival at the router to the first token")
                .Add({}, latency_seconds_buckets())),
      itl_(r.histogram("epd_inter_token_latency_seconds", "Gap between streamed tokens, per token")
               .Add({}, latency_seconds_buckets())),
      e2e_(r.histogram("epd_request_duration_seconds", "Arrival at the router to the last token (completed)")
               .Add({}, latency_seconds_buckets())),
      stages_(r.histogram("epd_request_stage_seconds",
                          "Stages of the room that answered: encode, prefill, kv_transfer, decode")),
      prompt_tokens_(r.counter("epd_prompt_tokens_total", "Prompt tokens of completed requests").Add({})),
      generated_tokens_(
          r.counter("epd_generation_tokens_total", "Tokens generated for completed requests").Add({})),
      placed_tokens_(r.counter("epd_router_placed_prompt_tokens_total",
                               "Prompt tokens of every attempt placed (the base of the placement hit ratio)")
                         .Add({})),
      matched_(r.counter(
          "epd_router_placed_cached_tokens_total",
          "Prompt tokens the chosen instance's prefix cache was believed to hold, by the instance's role")),
      matched_prefill_(matched_.Add({{"peer_role", "prefill"}})),
      matched_decode_(matched_.Add({{"peer_role", "decode"}})),
      in_flight_(r.gauge("epd_requests_in_flight", "Requests placed on instances now").Add({})),
      queued_(r.gauge("epd_requests_queued", "Requests waiting for an in-flight slot").Add({})),
      backlog_(r.gauge("epd_router_prompt_backlog_tokens",
                       "Prompt tokens accepted and not yet answered with a first token")
                   .Add({})),
      prompt_rate_(r.gauge("epd_router_prompt_tokens_per_second",
                           "Prompt tokens answered per second while some were waiting, lately (0: none yet)")
                       .Add({})) {
  for (const char* outcome : {"completed", "failed", "cancelled", "rejected"})
    requests_.Add({{"outcome", outcome}});  // every outcome from the start: rate() needs the zero
}

void RouterMetrics::request_done(std::string_view outcome) {
  requests_.Add({{"outcome", std::string(outcome)}}).Increment();
}

void RouterMetrics::failed(std::string_view code) {
  request_done("failed");
  failures_.Add({{"code", std::string(code)}}).Increment();
}

void RouterMetrics::retried(std::string_view code) {
  retries_.Add({{"code", std::string(code)}}).Increment();
}

void RouterMetrics::placed_prefix(uint64_t prompt_tokens, uint32_t prefill_matched, uint32_t decode_matched) {
  placed_tokens_.Increment(double(prompt_tokens));
  matched_prefill_.Increment(prefill_matched);
  matched_decode_.Increment(decode_matched);
}

void RouterMetrics::resumed(uint32_t tokens) {
  resumed_tokens_.Increment(tokens);
}

void RouterMetrics::completed(double ttft_seconds, double total_seconds, const protocol::RoomResult& res,
                              uint32_t prompt_tokens) {
  request_done("completed");
  ttft_.Observe(ttft_seconds);
  e2e_.Observe(total_seconds);
  const std::pair<const char*, uint64_t> stages[] = {{"encode", res.encode_us},
                                                     {"prefill", res.prefill_us},
                                                     {"kv_transfer", res.transfer_us},
                                                     {"decode", res.decode_us}};
  for (const auto& [stage, us] : stages) {
    if (std::string_view(stage) == "encode" && us == 0) continue;  // no image: no encode stage
    stages_.Add({{"stage", stage}}, latency_seconds_buckets()).Observe(double(us) / 1e6);
  }
  prompt_tokens_.Increment(prompt_tokens);
  generated_tokens_.Increment(double(res.tokens.size()));
}

void RouterMetrics::tokens_streamed(double gap_seconds, size_t count) {
  for (size_t i = 0; i < count; ++i) itl_.Observe(gap_seconds / double(count));
}

void RouterMetrics::occupancy(uint64_t in_flight, uint64_t queued, uint64_t backlog_tokens,
                              std::optional<double> prompt_tokens_per_s) {
  in_flight_.Set(double(in_flight));
  queued_.Set(double(queued));
  backlog_.Set(double(backlog_tokens));
  prompt_rate_.Set(prompt_tokens_per_s.value_or(0));
}

}  // namespace epd::actors
