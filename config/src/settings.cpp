#include "epd/config/settings.hpp"

#include "settings_table.hpp"

namespace epd::config {

using protocol::ErrorCode;
using protocol::make_error;

Settings::Settings() : table_(std::make_shared<SettingsTable>()) {}
Settings::Settings(std::shared_ptr<const SettingsTable> table, std::string where)
    : table_(std::move(table)), where_(std::move(where)) {}

namespace {
protocol::Error bad(const std::string& where, std::string_view key, const std::string& what) {
  return make_error(ErrorCode::config_error, where + ": key '" + std::string(key) + "' " + what);
}
}  // namespace

bool Settings::has(std::string_view key) const {
  return table_->table.contains(key);
}

protocol::Result<uint64_t> Settings::get_uint(std::string_view key, uint64_t fallback, uint64_t min,
                                              uint64_t max) const {
  const toml::node* n = table_->table.get(key);
  if (!n) return fallback;
  auto v = n->value<int64_t>();
  if (!n->is_integer() || !v) return bad(where_, key, "must be an integer");
  if (*v < 0 || uint64_t(*v) < min || uint64_t(*v) > max)
    return bad(
        where_, key,
        "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " + std::to_string(*v));
  return uint64_t(*v);
}

protocol::Result<double> Settings::get_double(std::string_view key, double fallback) const {
  const toml::node* n = table_->table.get(key);
  if (!n) return fallback;
  if (!n->is_number()) return bad(where_, key, "must be a number");
  return *n->value<double>();
}

protocol::Result<bool> Settings::get_bool(std::string_view key, bool fallback) const {
  const toml::node* n = table_->table.get(key);
  if (!n) return fallback;
  if (!n->is_boolean()) return bad(where_, key, "must be true or false");
  return *n->value<bool>();
}

protocol::Result<std::string> Settings::get_string(std::string_view key, std::string fallback) const {
  const toml::node* n = table_->table.get(key);
  if (!n) return fallback;
  if (!n->is_string()) return bad(where_, key, "must be a string");
  return *n->value<std::string>();
}

protocol::Result<std::chrono::milliseconds> Settings::get_ms(std::string_view key,
                                                             std::chrono::milliseconds fallback) const {
  auto v = get_uint(key, uint64_t(fallback.count()), 0, 24ull * 3600 * 1000);
  if (!v) return v.error();
  return std::chrono::milliseconds(*v);
}

protocol::Result<std::optional<Settings::Scalar>> Settings::get_scalar(std::string_view key) const {
  const toml::node* n = table_->table.get(key);
  if (!n) return std::optional<Scalar>();
  if (n->is_boolean()) return std::optional<Scalar>(*n->value<bool>());
  if (n->is_integer()) return std::optional<Scalar>(*n->value<int64_t>());
  if (n->is_floating_point()) return std::optional<Scalar>(*n->value<double>());
  if (n->is_string()) return std::optional<Scalar>(*n->value<std::string>());
  return bad(where_, key, "must be a boolean, number or string");
}

protocol::Status Settings::only_keys(const std::vector<std::string_view>& known) const {
  for (const auto& [k, _] : table_->table) {
    bool ok = false;
    for (auto name : known) ok = ok || k.str() == name;
    if (!ok) return bad(where_, k.str(), "is not known here (typo?)");
  }
  return {};
}

}  // namespace epd::config
