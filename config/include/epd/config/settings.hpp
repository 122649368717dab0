#pragma once
// Typed, validated access to one TOML table of role settings. Every getter names the file, instance and
// key in its error, so a broken config says exactly what to fix.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "epd/protocol/result.hpp"

namespace epd::config {

struct SettingsTable;  // wraps a toml::table; defined in the .cpp so users need not parse toml++ headers

class Settings {
 public:
  Settings();
  Settings(std::shared_ptr<const SettingsTable> table, std::string where);

  bool has(std::string_view key) const;
  protocol::Result<uint64_t> get_uint(std::string_view key, uint64_t fallback, uint64_t min = 0,
                                      uint64_t max = UINT64_MAX) const;
  protocol::Result<double> get_double(std::string_view key, double fallback) const;
  protocol::Result<bool> get_bool(std::string_view key, bool fallback) const;
  protocol::Result<std::string> get_string(std::string_view key, std::string fallback) const;
  protocol::Result<std::chrono::milliseconds> get_ms(std::string_view key,
                                                     std::chrono::milliseconds fallback) const;
  // The key's value when it is a scalar (boolean, integer, float, string), for settings handed over opaquely;
  // absent: the fallback-free empty optional; another type: an error naming the key.
  using Scalar = std::variant<bool, int64_t, double, std::string>;
  protocol::Result<std::optional<Scalar>> get_scalar(std::string_view key) const;
  // Keys present in the table that are not in `known`: typos get a clear error instead of being ignored.
  protocol::Status only_keys(const std::vector<std::string_view>& known) const;
  const std::string& where() const { return where_; }

 private:
  std::shared_ptr<const SettingsTable> table_;
  std::string where_;
};

}  // namespace epd::config
