#include "epd/transport/backend_options.hpp"

namespace epd::transport {

Error BackendOptions::bad(std::string_view key, const std::string& what) const {
  return make_error(ErrorCode::config_error, where + ": key '" + std::string(key) + "' " + what);
}

Result<uint64_t> BackendOptions::get_uint(std::string_view key, uint64_t fallback, uint64_t min,
                                          uint64_t max) const {
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  const int64_t* v = std::get_if<int64_t>(&it->second);
  if (!v) return bad(key, "must be an integer");
  if (*v < 0 || uint64_t(*v) < min || uint64_t(*v) > max)
    return bad(key, "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " +
                        std::to_string(*v));
  return uint64_t(*v);
}

Result<std::string> BackendOptions::get_string(std::string_view key, std::string fallback) const {
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  const std::string* v = std::get_if<std::string>(&it->second);
  if (!v) return bad(key, "must be a string");
  return *v;
}

Result<std::chrono::milliseconds> BackendOptions::get_ms(std::string_view key,
                                                         std::chrono::milliseconds fallback) const {
  auto v = get_uint(key, uint64_t(fallback.count()), 0, 24ull * 3600 * 1000);
  if (!v) return v.error();
  return std::chrono::milliseconds(*v);
}

}  // namespace epd::transport
