#pragma once
// What `epd-bench serve` sends: OpenAI request bodies with random printable prompts and lengths drawn from
// uniform distributions, and Poisson arrival times — all from one seed, so two runs send the same load.
// With `turns` > 1 an arrival is a conversation (serve_conversation.hpp) rather than one request.
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

namespace epd::bench {

// Uniform in mean × [1 - range, 1 + range], at least 1.
struct LengthDist {
  int mean = 64;
  double range = 0;
  int sample(std::mt19937_64& rng) const;
};

struct WorkloadOptions {
  bool chat = true;  // /v1/chat/completions, else /v1/completions
  std::string model;
  LengthDist prompt{64, 0}, output{16, 0};
  int system_chars = 0;  // a system prompt every request starts with (a shared prefix); 0 = none
  bool stream = true;
  std::string image_uri;  // a data URI; "" = text only
  double image_fraction = 1;
  double temperature = 0;                                // 0 = greedy; above it, request i carries seed + i
  nlohmann::json extra_body = nlohmann::json::object();  // merged into every body (e.g. top_k)
  uint64_t seed = 0;
  int turns = 1;  // user turns per conversation; 1 = independent requests
};

struct RequestPlan {
  std::string body;
  int prompt_chars = 0, max_tokens = 0;
  bool image = false;
};

class Workload {
 public:
  explicit Workload(WorkloadOptions o);
  RequestPlan next();
  std::string path() const { return o_.chat ? "/v1/chat/completions" : "/v1/completions"; }
  const WorkloadOptions& options() const { return o_; }
  const std::string& system_prompt() const { return system_; }

 private:
  WorkloadOptions o_;
  std::mt19937_64 rng_;
  std::string system_;
  uint64_t index_ = 0;
};

namespace workload {

// `n` random printable characters.
std::string printable_text(size_t n, std::mt19937_64& rng);

// A request body: `model`, max_tokens, temperature (and seed `o.seed + index` when sampling), the
// messages (chat) or prompt (completions) given, streaming as `o` says, then `o.extra_body` merged in.
std::string request_body(const WorkloadOptions& o, nlohmann::json input, int max_tokens, uint64_t index);

}  // namespace workload

// Gaps between arrivals of a Poisson process of `rate` requests/s (exponential, seeded); an infinite rate
// gives gaps of 0: everything arrives at once.
class Arrivals {
 public:
  Arrivals(double rate, uint64_t seed) : rate_(rate), rng_(seed ^ 0x9e3779b97f4a7c15ull) {}
  std::chrono::nanoseconds next_gap();

 private:
  double rate_;
  std::mt19937_64 rng_;
};

}  // namespace epd::bench
