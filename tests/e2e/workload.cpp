#include "workload.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include <map>
#include <mutex>
#include <stdexcept>
#include <string_view>

#include "epd/http/base64.hpp"
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

const std::vector<uint32_t>& oracle(const Case& c, const std::optional<model::KvLayoutChoice>& decode_kv) {
  static std::mutex mu;
  static std::map<std::string, std::vector<uint32_t>> memo;
  const std::string key =
      c.prompt + "|" + std::to_string(c.max_tokens) + "|" +
      (c.image ? std::to_string(c.image->width) + "x" + std::to_string(c.image->height) + " " +
                     std::to_string(std::hash<std::string_view>{}(std::string_view(
                         reinterpret_cast<const char*>(c.image->rgb.data()), c.image->rgb.size())))
               : "") +
      (decode_kv ? "|kv " + std::to_string(decode_kv->page_size) + " " +
                       std::to_string(int(decode_kv->dtype)) + " " + std::to_string(int(decode_kv->order))
                 : "");
  std::lock_guard lock(mu);
  if (auto it = memo.find(key); it != memo.end()) return it->second;
  static auto cfg = model::preset("tiny");
  auto runner = model::make_reference_runner(*cfg);
  model::GenerateOptions opts;
  opts.max_tokens = c.max_tokens;
  opts.decode_kv = decode_kv;
  auto r = model::generate(**runner, c.prompt, c.image ? &*c.image : nullptr, opts);
  if (!r) throw std::runtime_error("oracle: " + r.error().to_string());
  return memo.emplace(key, r->tokens).first->second;
}

nlohmann::json request_of(const Case& c) {
  nlohmann::json j{{"prompt", c.prompt}, {"max_tokens", c.max_tokens}};
  if (c.image) j["image"] = http::base64_encode(model::encode_ppm(*c.image));
  return j;
}

// Sends every case, `parallel` in flight, and checks each answer against the oracle.
void run_and_compare(Cluster& cluster, int n, int parallel,
                     const std::optional<model::KvLayoutChoice>& decode_kv, bool retries_allowed) {
  const auto cases = workload(n);
  std::vector<std::vector<uint32_t>> expected;
  for (const auto& c : cases) expected.push_back(oracle(c, decode_kv));
  std::vector<std::pair<int, nlohmann::json>> answers(cases.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < parallel; ++t)
    threads.emplace_back([&] {
      for (size_t i = next++; i < cases.size(); i = next++)
        answers[i] = cluster.generate(request_of(cases[i]));
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO("case " << i << ": " << answers[i].second.dump().substr(0, 400));
    REQUIRE(answers[i].first == 200);
    CHECK(answers[i].second["tokens"].get<std::vector<uint32_t>>() == expected[i]);
    if (!retries_allowed) CHECK(answers[i].second["attempts"] == 1);
    if (cases[i].image) CHECK_FALSE(answers[i].second["instances"]["encoder"].get<std::string>().empty());
  }
  // Every KV page and embedding slot is free again.
  const nlohmann::json inst = cluster.wait_all_free();
  INFO(inst.dump());
  for (const auto& i : inst) {
    CHECK(i["free_kv_pages"] == i["total_kv_pages"]);
    CHECK(i["free_slots"] == i["total_slots"]);
    CHECK(i["active_rooms"] == 0);
  }
}

}  // namespace epd::testing
