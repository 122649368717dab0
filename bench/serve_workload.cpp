#include "serve_workload.hpp"

#include <cmath>

namespace epd::bench {

int LengthDist::sample(std::mt19937_64& rng) const {
  if (range <= 0) return std::max(1, mean);
  const double lo = mean * (1 - range), hi = mean * (1 + range);
  return std::max(1, int(std::lround(std::uniform_real_distribution<double>(lo, hi)(rng))));
}

namespace workload {

// `n` random printable characters: 1 byte = 1 token for the byte-level model, no escaping surprises.
std::string printable_text(size_t n, std::mt19937_64& rng) {
  std::string text(n, ' ');
  std::uniform_int_distribution<int> printable(0x20, 0x7e);
  for (auto& c : text) c = char(printable(rng));
  return text;
}

std::string request_body(const WorkloadOptions& o, nlohmann::json input, int max_tokens, uint64_t index) {
  nlohmann::json body = {{"model", o.model}, {"max_tokens", max_tokens}, {"temperature", o.temperature}};
  if (o.temperature > 0) body["seed"] = o.seed + index;
  body[o.chat ? "messages" : "prompt"] = std::move(input);
  if (o.stream) {
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
  }
  body.update(o.extra_body);
  return body.dump();
}

}  // namespace workload

Workload::Workload(WorkloadOptions o) : o_(std::move(o)), rng_(o_.seed) {
  // Drawn from its own stream, so adding a system prompt leaves every request's own text as it was.
  std::mt19937_64 system_rng(o_.seed ^ 0x5ca1ab1eull);
  system_ = workload::printable_text(size_t(std::max(0, o_.system_chars)), system_rng);
}

RequestPlan Workload::next() {
  RequestPlan p;
  p.prompt_chars = o_.prompt.sample(rng_);
  p.max_tokens = o_.output.sample(rng_);
  p.image = !o_.image_uri.empty() && std::uniform_real_distribution<double>(0, 1)(rng_) < o_.image_fraction;
  const std::string text = workload::printable_text(size_t(p.prompt_chars), rng_);
  nlohmann::json input = system_ + text;
  if (o_.chat) {
    nlohmann::json content = text;
    if (p.image)
      content = nlohmann::json::array({{{"type", "image_url"}, {"image_url", {{"url", o_.image_uri}}}},
                                       {{"type", "text"}, {"text", text}}});
    input = nlohmann::json::array();
    if (!system_.empty()) input.push_back({{"role", "system"}, {"content", system_}});
    input.push_back({{"role", "user"}, {"content", content}});
  }
  p.body = workload::request_body(o_, std::move(input), p.max_tokens, index_);
  ++index_;
  return p;
}

std::chrono::nanoseconds Arrivals::next_gap() {
  if (std::isinf(rate_)) return std::chrono::nanoseconds(0);
  const double s = std::exponential_distribution<double>(rate_)(rng_);
  return std::chrono::nanoseconds(int64_t(s * 1e9));
}

}  // namespace epd::bench
