#include "workload.hpp"

#include <map>
#include <mutex>
#include <stdexcept>

#include "epd/actors/router/base64.hpp"
#include "epd/model/generate.hpp"

namespace epd::testing {

std::vector<Case> workload(int n) {
  std::vector<Case> out;
  for (int i = 0; i < n; ++i) {
    Case c;
    c.prompt =
        "request " + std::to_string(i) + ": " + std::string(size_t(5 + 13 * i % 90), char('a' + i % 26));
    if (i % 2 == 1) c.image = model::make_test_image(8 + 8 * (i % 4), 16 + 4 * (i % 3), uint64_t(i));
    c.max_tokens = 4 + uint32_t(i % 9);
    out.push_back(std::move(c));
  }
  return out;
}

const std::vector<uint32_t>& oracle(const Case& c) {
  static std::mutex mu;
  static std::map<std::string, std::vector<uint32_t>> memo;
  const std::string key =
      c.prompt + "|" + std::to_string(c.max_tokens) + "|" +
      (c.image ? std::to_string(c.image->width) + "x" + std::to_string(c.image->height) : "");
  std::lock_guard lock(mu);
  if (auto it = memo.find(key); it != memo.end()) return it->second;
  static auto cfg = model::preset("tiny");
  auto runner = model::make_reference_runner(*cfg);
  model::GenerateOptions opts;
  opts.max_tokens = c.max_tokens;
  auto r = model::generate(**runner, c.prompt, c.image ? &*c.image : nullptr, opts);
  if (!r) throw std::runtime_error("oracle: " + r.error().to_string());
  return memo.emplace(key, r->tokens).first->second;
}

nlohmann::json request_of(const Case& c) {
  nlohmann::json j{{"prompt", c.prompt}, {"max_tokens", c.max_tokens}};
  if (c.image) j["image"] = actors::base64_encode(model::encode_ppm(*c.image));
  return j;
}

}  // namespace epd::testing
