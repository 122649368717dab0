#pragma once
// A backend's own settings, handed over opaquely: the config layer copies every key a backend declares
// (tcp_lanes, rdma_device, ...) from TOML into this map, and only that backend interprets them. Getters name
// the key (and `where`, e.g. the config file and instance) in their errors.
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>

#include "epd/transport/types.hpp"

namespace epd::transport {

// A TOML scalar: boolean, integer, float or string.
using OptionValue = std::variant<bool, int64_t, double, std::string>;

class BackendOptions {
 public:
  void set(std::string key, OptionValue value) { values_.insert_or_assign(std::move(key), std::move(value)); }
  bool has(std::string_view key) const { return values_.find(key) != values_.end(); }
  const std::map<std::string, OptionValue, std::less<>>& values() const { return values_; }

  Result<uint64_t> get_uint(std::string_view key, uint64_t fallback, uint64_t min = 0,
                            uint64_t max = UINT64_MAX) const;
  Result<std::string> get_string(std::string_view key, std::string fallback) const;
  Result<std::chrono::milliseconds> get_ms(std::string_view key, std::chrono::milliseconds fallback) const;
  // config_error "<where>: key '<key>' <what>".
  Error bad(std::string_view key, const std::string& what) const;

  std::string where = "transport options";  // prefix of every error (the config file and instance)

 private:
  std::map<std::string, OptionValue, std::less<>> values_;
};

}  // namespace epd::transport
