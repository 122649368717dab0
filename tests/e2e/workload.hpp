#pragma once
// The e2e workload: deterministic prompts (every other one with an image), the oracle (the colocated
// reference run, the code epd-run uses) and the HTTP request body of each case.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "epd/model/image.hpp"

namespace epd::testing {

struct Case {
  std::string prompt;
  std::optional<model::Image> image;
  uint32_t max_tokens;
};

std::vector<Case> workload(int n);
// Memoised: the fault tests ask for the same cases many times.
const std::vector<uint32_t>& oracle(const Case& c);
nlohmann::json request_of(const Case& c);

}  // namespace epd::testing
