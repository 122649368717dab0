#pragma once
// The e2e workload: deterministic prompts (every other one with an image), the oracle (the colocated
// reference run, the code epd-run uses) and the HTTP request body of each case.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cluster.hpp"
#include "epd/model/generate.hpp"
#include "epd/model/image.hpp"

namespace epd::testing {

struct Case {
  std::string prompt;
  std::optional<model::Image> image;
  uint32_t max_tokens;
};

std::vector<Case> workload(int n);
// Memoised: the fault tests ask for the same cases many times. `decode_kv`: decode holds its KV in another
// layout (staged transfer); the oracle then prefills in the default layout and decodes from a converted copy,
// exactly what the staged path does.
const std::vector<uint32_t>& oracle(const Case& c,
                                    const std::optional<model::KvLayoutChoice>& decode_kv = std::nullopt);
nlohmann::json request_of(const Case& c);

// Sends `n` workload cases, `parallel` in flight, checks every answer against the oracle (on the first
// attempt unless `retries_allowed`), then that every KV page, slot and room is free again.
void run_and_compare(Cluster& cluster, int n, int parallel,
                     const std::optional<model::KvLayoutChoice>& decode_kv = std::nullopt,
                     bool retries_allowed = false);

}  // namespace epd::testing
