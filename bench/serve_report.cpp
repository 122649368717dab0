#include "serve_report.hpp"

#include <numeric>

#include "stats.hpp"

namespace epd::bench {

Dist make_dist(const std::vector<double>& v) {
  Dist d;
  d.n = v.size();
  if (v.empty()) return d;
  d.mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  d.p50 = percentile(v, 50);
  d.p90 = percentile(v, 90);
  d.p99 = percentile(v, 99);
  return d;
}

Summary summarize(const std::vector<RequestRecord>& records, double duration_s) {
  Summary s;
  s.sent = records.size();
  s.duration_s = duration_s;
  std::vector<double> ttft, itl, tpot, e2e, queued, overhead, router_ttft, client_ttft;
  std::vector<std::vector<double>> turn_ttft, turn_prompt;  // by turn index
  long conversations = -1;
  for (const auto& r : records) {
    if (r.conversation >= 0) {
      conversations = std::max(conversations, r.conversation);
      if (turn_ttft.size() <= size_t(r.turn))
        turn_ttft.resize(size_t(r.turn) + 1), turn_prompt.resize(size_t(r.turn) + 1);
      if (r.error.empty() && r.ttft_ms >= 0) turn_ttft[size_t(r.turn)].push_back(r.ttft_ms);
      if (r.error.empty()) turn_prompt[size_t(r.turn)].push_back(double(r.prompt_tokens));
    }
    queued.push_back(r.queued_ms);
    if (!r.error.empty()) {
      ++s.failed;
      ++s.errors[r.error];
      continue;
    }
    ++s.ok;
    s.output_tokens += r.output_tokens;
    s.prompt_tokens += r.prompt_tokens;
    e2e.push_back(r.e2e_ms);
    if (r.ttft_ms >= 0) ttft.push_back(r.ttft_ms);
    itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
    if (r.output_tokens > 1 && r.ttft_ms >= 0) tpot.push_back((r.e2e_ms - r.ttft_ms) / (r.output_tokens - 1));
    if (r.router_ttft_ms >= 0 && r.ttft_ms >= 0) {
      overhead.push_back(r.ttft_ms - r.router_ttft_ms);
      router_ttft.push_back(r.router_ttft_ms);
      client_ttft.push_back(r.ttft_ms);
    }
  }
  s.ttft = make_dist(ttft);
  s.itl = make_dist(itl);
  s.tpot = make_dist(tpot);
  s.e2e = make_dist(e2e);
  s.queued = make_dist(queued);
  s.overhead = make_dist(overhead);
  s.conversations = size_t(conversations + 1);
  for (size_t t = 0; t < turn_ttft.size(); ++t) {
    s.ttft_by_turn.push_back(make_dist(turn_ttft[t]));
    s.prompt_tokens_by_turn.push_back(make_dist(turn_prompt[t]).mean);
  }
  const double router_p50 = percentile(router_ttft, 50);
  s.ttft_ratio_p50 = router_p50 > 0 ? percentile(client_ttft, 50) / router_p50 : 0;
  if (duration_s > 0) {
    s.requests_per_s = double(s.ok) / duration_s;
    s.output_tokens_per_s = double(s.output_tokens) / duration_s;
  }
  return s;
}

namespace {

void dist_line(std::FILE* out, const char* name, const Dist& d) {
  std::fprintf(out, "  %-24s mean %9.2f  p50 %9.2f  p90 %9.2f  p99 %9.2f ms  (n=%zu)\n", name, d.mean, d.p50,
               d.p90, d.p99, d.n);
}

nlohmann::json dist_json(const Dist& d) {
  return {{"n", d.n}, {"mean", d.mean}, {"p50", d.p50}, {"p90", d.p90}, {"p99", d.p99}};
}

}  // namespace

void print_turns(std::FILE* out, const Summary& s, const char* indent) {
  std::fprintf(out, "%s%zu conversations of %zu turns; by turn: TTFT p50 (ms) / mean prompt tokens\n%s ",
               indent, s.conversations, s.ttft_by_turn.size(), indent);
  for (size_t t = 0; t < s.ttft_by_turn.size(); ++t)
    std::fprintf(out, " %zu: %.2f / %.0f%s", t + 1, s.ttft_by_turn[t].p50, s.prompt_tokens_by_turn[t],
                 t + 1 < s.ttft_by_turn.size() ? "," : "\n");
}

void print_summary(std::FILE* out, const Summary& s, bool streamed) {
  std::fprintf(out, "requests: %zu sent, %zu ok, %zu failed in %.2f s\n", s.sent, s.ok, s.failed,
               s.duration_s);
  for (const auto& [what, n] : s.errors) std::fprintf(out, "  error %-40s x%zu\n", what.c_str(), n);
  std::fprintf(out, "throughput: %.2f requests/s, %.1f output tokens/s (%lld output, %lld prompt tokens)\n",
               s.requests_per_s, s.output_tokens_per_s, s.output_tokens, s.prompt_tokens);
  std::fprintf(out, "max in flight: %zu requests, %zu connections opened\n", s.max_in_flight, s.connections);
  dist_line(out, streamed ? "TTFT" : "TTFT (= E2E, not streamed)", s.ttft);
  if (streamed) {
    dist_line(out, "ITL (between deltas)", s.itl);
    dist_line(out, "TPOT (per request)", s.tpot);
  }
  dist_line(out, "E2E", s.e2e);
  if (s.queued.p99 >= 0.01) dist_line(out, "queued for a slot", s.queued);
  if (!s.ttft_by_turn.empty()) print_turns(out, s);
  if (s.overhead.n) {
    std::fprintf(out,
                 "HTTP/SSE overhead (client TTFT - router epd.first_token_ms): p50 %.3f ms, p99 %.3f ms; ",
                 s.overhead.p50, s.overhead.p99);
    std::fprintf(out, "client/router TTFT p50 %.3fx\n", s.ttft_ratio_p50);
  } else {
    std::fprintf(out, "HTTP/SSE overhead: no epd.first_token_ms in the answers\n");
  }
}

nlohmann::json to_json(const Summary& s) {
  return {{"sent", s.sent},
          {"ok", s.ok},
          {"failed", s.failed},
          {"errors", s.errors},
          {"duration_s", s.duration_s},
          {"requests_per_s", s.requests_per_s},
          {"output_tokens_per_s", s.output_tokens_per_s},
          {"output_tokens", s.output_tokens},
          {"prompt_tokens", s.prompt_tokens},
          {"max_in_flight", s.max_in_flight},
          {"connections", s.connections},
          {"ttft_ms", dist_json(s.ttft)},
          {"itl_ms", dist_json(s.itl)},
          {"tpot_ms", dist_json(s.tpot)},
          {"e2e_ms", dist_json(s.e2e)},
          {"queued_ms", dist_json(s.queued)},
          {"overhead_ms", dist_json(s.overhead)},
          {"ttft_ratio_p50", s.ttft_ratio_p50},
          {"conversations", s.conversations},
          {"ttft_ms_by_turn",
           [&] {
             auto a = nlohmann::json::array();
             for (const auto& d : s.ttft_by_turn) a.push_back(dist_json(d));
             return a;
           }()},
          {"prompt_tokens_mean_by_turn", s.prompt_tokens_by_turn}};
}

bool write_csv(const std::string& path, const std::vector<RequestRecord>& records) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  std::fprintf(f,
               "index,start_ms,queued_ms,status,error,ttft_ms,router_ttft_ms,e2e_ms,itl_mean_ms,deltas,"
               "output_tokens,prompt_tokens,prompt_chars,max_tokens,image,request_id,conversation,turn,"
               "answer_bytes\n");
  for (size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    double itl = 0;
    for (double x : r.itl_ms) itl += x;
    if (!r.itl_ms.empty()) itl /= double(r.itl_ms.size());
    std::string err = r.error;  // quoted CSV field
    for (size_t p = 0; (p = err.find('"', p)) != std::string::npos; p += 2) err.insert(p, 1, '"');
    std::fprintf(f, "%zu,%.3f,%.3f,%u,\"%s\",%.3f,%.3f,%.3f,%.3f,%d,%d,%d,%d,%d,%d,%s,%ld,%d,%zu\n", i,
                 r.start_ms, r.queued_ms, r.status, err.c_str(), r.ttft_ms, r.router_ttft_ms, r.e2e_ms, itl,
                 r.deltas, r.output_tokens, r.prompt_tokens, r.prompt_chars, r.max_tokens, int(r.image),
                 r.request_id.c_str(), r.conversation, r.turn, r.answer_bytes);
  }
  return std::fclose(f) == 0;
}

}  // namespace epd::bench
