#pragma once
// What every fuzz target shares: FUZZ_CHECK, an invariant checked on each input (a violation aborts, which
// libFuzzer reports as a crash and saves the input), and FuzzInput, which splits the input bytes into the
// numbers and pieces a structured target needs (missing bytes read as zero, so every input is usable).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string_view>

#define FUZZ_CHECK(cond)                                                                     \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

namespace epd::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : bytes_(data, size) {}

  bool empty() const { return pos_ >= bytes_.size(); }
  template <class T>
  T take() {
    T v{};
    const size_t n = std::min(sizeof(T), bytes_.size() - pos_);
    std::memcpy(&v, bytes_.data() + pos_, n);
    pos_ += n;
    return v;
  }
  std::span<const uint8_t> take_bytes(size_t n) {
    n = std::min(n, bytes_.size() - pos_);
    auto out = bytes_.subspan(pos_, n);
    pos_ += n;
    return out;
  }
  std::span<const uint8_t> rest() { return take_bytes(bytes_.size() - pos_); }
  std::string_view rest_text() {
    auto r = rest();
    return {reinterpret_cast<const char*>(r.data()), r.size()};
  }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

}  // namespace epd::fuzz
