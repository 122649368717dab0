#pragma once
// What `epd-bench serve` measured: one record per request, the summary (percentiles, throughput, errors,
// HTTP/SSE overhead over the router's own TTFT) and its text, CSV and JSON forms.
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace epd::bench {

struct RequestRecord {
  double start_ms = 0;   // sent, since the run started
  double queued_ms = 0;  // waited for a --max-concurrency slot before it was sent
  unsigned status = 0;
  std::string error;  // "" = ok; otherwise what went wrong, used as a counter key ("429 rate_limit_exceeded")
  double ttft_ms = -1;  // to the first content delta (a whole answer when not streamed)
  double e2e_ms = 0;
  std::vector<double> itl_ms;  // between content deltas
  int deltas = 0, output_tokens = 0, prompt_tokens = 0;
  double router_ttft_ms = -1;  // the router's own TTFT, epd.first_token_ms
  int prompt_chars = 0, max_tokens = 0;
  bool image = false;
  std::string request_id;
  long conversation = -1;  // with --turns: which conversation, and its turn (0 = the first)
  int turn = 0;
  size_t answer_bytes = 0;  // the content received (the text a conversation resends)
};

struct Dist {
  size_t n = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;
};
Dist make_dist(const std::vector<double>& v);

struct Summary {
  size_t sent = 0, ok = 0, failed = 0;
  std::map<std::string, size_t> errors;
  double duration_s = 0, requests_per_s = 0, output_tokens_per_s = 0;
  long long output_tokens = 0, prompt_tokens = 0;
  Dist ttft, itl, tpot, e2e, queued;
  // Client TTFT minus the router's: what HTTP, SSE framing and the client add.
  Dist overhead;
  double ttft_ratio_p50 = 0;  // p50 client TTFT / p50 router TTFT (same requests)
  size_t max_in_flight = 0, connections = 0;
  // With --turns: per turn index (0 = first), the TTFT of its successful requests and its mean prompt
  // tokens (usage.prompt_tokens), which show the history growing and the prefix caches at work.
  std::vector<Dist> ttft_by_turn{};
  std::vector<double> prompt_tokens_by_turn{};
  size_t conversations = 0;
};

// One --concurrency level of `--compare llama-server`: each server's figures and the peak RSS of its
// processes so far (0: not measured).
struct CompareLevel {
  size_t concurrency = 0;
  Summary epd{}, llama{};
  double epd_rss_mib = 0, llama_rss_mib = 0;
};

Summary summarize(const std::vector<RequestRecord>& records, double duration_s);
void print_summary(std::FILE* out, const Summary& s, bool streamed);
// With --turns: the conversations and, per turn index, TTFT p50 and mean prompt tokens.
void print_turns(std::FILE* out, const Summary& s, const char* indent = "");
nlohmann::json to_json(const Summary& s);
// One row per request.
bool write_csv(const std::string& path, const std::vector<RequestRecord>& records);

}  // namespace epd::bench
