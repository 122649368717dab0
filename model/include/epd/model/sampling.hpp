#pragma once
// TEMPORARY stand-in until the sampling branch lands.
#include <cstdint>
namespace epd::model {
struct SamplingParams {
  float temperature = 0;
  float top_p = 1;
  uint32_t top_k = 0;
  uint64_t seed = 0;
  bool operator==(const SamplingParams&) const = default;
};
}  // namespace epd::model
