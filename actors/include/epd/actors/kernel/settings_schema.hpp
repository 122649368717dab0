#pragma once
// A role's settings, declared once: each entry names its key, the field it fills, its bounds, and takes
// its default from the field's initial value. The same declaration gives the keys the config may hold
// (RoleSpec::settings, so typos are refused) and the parsing, which names the file, instance and key of
// the first bad value.
#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "epd/config/settings.hpp"
#include "epd/protocol/result.hpp"

namespace epd::actors {
struct RoleContext;
}

namespace epd::actors::kernel {

template <class S>
class SettingsSchema {
 public:
  // Reads some keys into `out`, with the role's context (e.g. the model) at hand.
  using Reader = std::function<protocol::Status(const RoleContext&, const config::Settings&, S& out)>;

  SettingsSchema& u32(std::string_view key, uint32_t S::*field, uint32_t min, uint32_t max) {
    return add({key}, [key, field, min, max](const RoleContext&, const config::Settings& s, S& out) {
      auto v = s.get_uint(key, out.*field, min, max);
      if (!v) return protocol::Status(v.error());
      out.*field = uint32_t(*v);
      return protocol::Status{};
    });
  }
  SettingsSchema& u64(std::string_view key, uint64_t S::*field, uint64_t min, uint64_t max) {
    return add({key}, [key, field, min, max](const RoleContext&, const config::Settings& s, S& out) {
      auto v = s.get_uint(key, out.*field, min, max);
      if (!v) return protocol::Status(v.error());
      out.*field = *v;
      return protocol::Status{};
    });
  }
  SettingsSchema& ms(std::string_view key, std::chrono::milliseconds S::*field) {
    return add({key}, [key, field](const RoleContext&, const config::Settings& s, S& out) {
      auto v = s.get_ms(key, out.*field);
      if (!v) return protocol::Status(v.error());
      out.*field = *v;
      return protocol::Status{};
    });
  }
  SettingsSchema& str(std::string_view key, std::string S::*field) {
    return add({key}, [key, field](const RoleContext&, const config::Settings& s, S& out) {
      auto v = s.get_string(key, out.*field);
      if (!v) return protocol::Status(v.error());
      out.*field = std::move(*v);
      return protocol::Status{};
    });
  }
  // Settings shared by several roles (e.g. the transfer workers'), read into one member.
  template <class Part>
  SettingsSchema& part(Part S::*field, const SettingsSchema<Part>& schema) {
    return add(schema.keys(), [field, schema](const RoleContext& ctx, const config::Settings& s, S& out) {
      return schema.read_into(ctx, s, out.*field);
    });
  }
  // Keys read together by `reader` (entries run in order, so it sees the fields read before it).
  SettingsSchema& add(std::vector<std::string_view> keys, Reader reader) {
    keys_.insert(keys_.end(), keys.begin(), keys.end());
    readers_.push_back(std::move(reader));
    return *this;
  }

  const std::vector<std::string_view>& keys() const { return keys_; }

  protocol::Status read_into(const RoleContext& ctx, const config::Settings& s, S& out) const {
    for (const auto& r : readers_)
      if (auto st = r(ctx, s, out); !st) return st;
    return {};
  }
  // The settings of the instance `ctx` runs, defaults where a key is absent.
  protocol::Result<S> read(const RoleContext& ctx, const config::Settings& s) const {
    S out{};
    if (auto st = read_into(ctx, s, out); !st) return st.error();
    return out;
  }

 private:
  std::vector<std::string_view> keys_;
  std::vector<Reader> readers_;
};

}  // namespace epd::actors::kernel
