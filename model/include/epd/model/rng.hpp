#pragma once
// SplitMix64 (Steele, Lea, Flood 2014): the only PRNG used for weights and test data. Chosen because
// it is tiny, fully specified, and the same on every platform. docs/model.md gives the exact derivation.
#include <cstdint>

namespace epd::model {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

// The SplitMix64 output function.
constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class SplitMix64 {
 public:
  explicit constexpr SplitMix64(uint64_t state) : state_(state) {}
  constexpr uint64_t next() { return mix64(state_ += kGolden); }
  // Uniform in [-1, 1): the top 24 bits give an exactly representable float.
  constexpr float uniform_pm1() { return static_cast<float>(next() >> 40) * (1.0f / 8388608.0f) - 1.0f; }

 private:
  uint64_t state_;
};

// Independent stream for one tensor: state = mix64(seed ^ mix64(tag)).
constexpr SplitMix64 tensor_stream(uint64_t seed, uint64_t tag) {
  return SplitMix64(mix64(seed ^ mix64(tag)));
}

}  // namespace epd::model
