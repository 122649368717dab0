#pragma once
// Builds messages with every field set to a non-default value, so round-trip tests cover each field
// without listing them by hand (a field added to a struct is covered automatically).
#include <string>
#include <type_traits>
#include <vector>

#include "epd/protocol/messages.hpp"

namespace epd::protocol::testing {

class Filler {
 public:
  explicit Filler(uint32_t seed) : n_(seed) {}

  template <class T>
  void req(std::string_view, T& v) {
    fill(v);
  }
  template <class T>
  void opt(std::string_view, T& v) {
    fill(v);
  }

  template <class T>
  void fill(T& v) {
    ++n_;
    if constexpr (std::is_same_v<T, bool>) {
      v = !v;
    } else if constexpr (std::is_enum_v<T>) {
      v = static_cast<T>(1);  // every wire enum defines 1
    } else if constexpr (std::is_integral_v<T>) {
      v = static_cast<T>(n_ * 7 + 3);
    } else if constexpr (std::is_floating_point_v<T>) {
      v = static_cast<T>(n_) + 0.5;
    } else if constexpr (std::is_same_v<T, std::string>) {
      v = "s";
      v += std::to_string(n_);
    } else if constexpr (std::is_same_v<T, std::vector<uint8_t>>) {
      v = {uint8_t(n_), 0, 255, uint8_t(n_ >> 8)};
    } else if constexpr (requires { v.try_emplace(std::string()); }) {
      v.clear();  // a map of named blobs: two entries
      fill(v["a" + std::to_string(n_)]);
      fill(v["b" + std::to_string(n_)]);
    } else if constexpr (requires { v.emplace_back(); }) {
      v.clear();
      fill(v.emplace_back());
      fill(v.emplace_back());
    } else if constexpr (requires { v.emplace(); }) {
      fill(v.emplace());
    } else {
      T::fields(v, *this);
    }
  }

 private:
  uint32_t n_;
};

template <class T>
T sample(uint32_t seed = 1) {
  T v{};
  Filler(seed).fill(v);
  return v;
}

template <class F, size_t I = 0>
void for_each_message_type(F&& f) {
  if constexpr (I < std::variant_size_v<Body>) {
    f(std::variant_alternative_t<I, Body>{});
    for_each_message_type<F, I + 1>(std::forward<F>(f));
  }
}

}  // namespace epd::protocol::testing
