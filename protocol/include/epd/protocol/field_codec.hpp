#pragma once
// Generic msgpack encoding of structs that list their fields with `fields(s, v)`.
// Writing emits a map of the listed keys; reading checks types, integer ranges, enum ranges and required
// keys, and reports the first problem as an Error naming the field path. Reading never throws.
#include <cmath>
#include <limits>
#include <map>
#include <msgpack.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "epd/protocol/errors.hpp"

namespace epd::protocol::detail {

template <class T>
struct is_vector : std::false_type {};
template <class T>
struct is_vector<std::vector<T>> : std::true_type {};
template <class T>
struct is_optional : std::false_type {};
// Opaque named blobs (e.g. each transfer backend's connection info): a msgpack map of str -> bin.
using BlobMap = std::map<std::string, std::vector<uint8_t>>;
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

// ---- writing ----------------------------------------------------------------------------------------------

template <class Stream>
class Writer {
 public:
  explicit Writer(msgpack::packer<Stream>& pk) : pk_(pk) {}

  template <class T>
  void write_struct(const T& s) {
    Counter counter;
    T::fields(s, counter);
    pk_.pack_map(counter.n);
    T::fields(s, *this);
  }

  template <class T>
  void req(std::string_view key, const T& value) {
    pk_.pack_str(static_cast<uint32_t>(key.size()));
    pk_.pack_str_body(key.data(), static_cast<uint32_t>(key.size()));
    write_value(value);
  }
  template <class T>
  void opt(std::string_view key, const T& value) {
    if constexpr (is_optional<T>::value) {
      if (!value) return;
    }
    req(key, value);
  }

 private:
  struct Counter {
    uint32_t n = 0;
    template <class T>
    void req(std::string_view, const T&) {
      ++n;
    }
    template <class T>
    void opt(std::string_view, const T& v) {
      if constexpr (is_optional<T>::value) {
        if (!v) return;
      }
      ++n;
    }
  };

  template <class T>
  void write_value(const T& v) {
    if constexpr (std::is_same_v<T, bool>) {
      v ? pk_.pack_true() : pk_.pack_false();
    } else if constexpr (std::is_enum_v<T>) {
      pk_.pack(static_cast<uint64_t>(v));
    } else if constexpr (std::is_integral_v<T> || std::is_floating_point_v<T>) {
      pk_.pack(v);
    } else if constexpr (std::is_same_v<T, std::string>) {
      pk_.pack(v);
    } else if constexpr (std::is_same_v<T, std::vector<uint8_t>>) {
      pk_.pack_bin(static_cast<uint32_t>(v.size()));
      pk_.pack_bin_body(reinterpret_cast<const char*>(v.data()), static_cast<uint32_t>(v.size()));
    } else if constexpr (std::is_same_v<T, BlobMap>) {
      pk_.pack_map(static_cast<uint32_t>(v.size()));
      for (const auto& [key, blob] : v) {
        pk_.pack(key);
        write_value(blob);
      }
    } else if constexpr (is_vector<T>::value) {
      pk_.pack_array(static_cast<uint32_t>(v.size()));
      for (const auto& e : v) write_value(e);
    } else if constexpr (is_optional<T>::value) {
      if (v)
        write_value(*v);
      else
        pk_.pack_nil();
    } else {
      write_struct(v);
    }
  }

  msgpack::packer<Stream>& pk_;
};

// ---- reading ----------------------------------------------------------------------------------------------

class Reader {
 public:
  // Reads `o` into `out`; returns false and fills error() on the first problem.
  template <class T>
  bool read_struct(const msgpack::object& o, T& out) {
    if (o.type != msgpack::type::MAP) return fail(ErrorCode::bad_field_type, "expected a map");
    const msgpack::object_map* saved = map_;
    map_ = &o.via.map;
    T::fields(out, *this);
    map_ = saved;
    return !failed_;
  }

  template <class T>
  void req(std::string_view key, T& value) {
    field(key, value, true);
  }
  template <class T>
  void opt(std::string_view key, T& value) {
    field(key, value, false);
  }

  bool failed() const { return failed_; }
  const Error& error() const { return error_; }

 private:
  template <class T>
  void field(std::string_view key, T& value, bool required) {
    if (failed_) return;
    const msgpack::object* o = find(key);
    if (o == nullptr) {
      if (required)
        fail(ErrorCode::missing_field, std::string("missing required field '") + std::string(key) + "'");
      return;
    }
    path_.push_back(key);
    read_value(*o, value);
    path_.pop_back();
  }

  const msgpack::object* find(std::string_view key) const {
    for (uint32_t i = 0; i < map_->size; ++i) {
      const auto& kv = map_->ptr[i];
      if (kv.key.type == msgpack::type::STR &&
          std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == key)
        return &kv.val;
    }
    return nullptr;
  }

  template <class T>
  void read_value(const msgpack::object& o, T& v) {
    using msgpack::type::object_type;
    if constexpr (std::is_same_v<T, bool>) {
      if (o.type != object_type::BOOLEAN) return type_fail("a boolean", o);
      v = o.via.boolean;
    } else if constexpr (std::is_enum_v<T>) {
      if (o.type != object_type::POSITIVE_INTEGER) return type_fail("an enum (unsigned integer)", o);
      if (!wire_enum_valid(T{}, o.via.u64))
        return (void)fail(ErrorCode::enum_out_of_range,
                          where() + ": value " + std::to_string(o.via.u64) + " is not defined for this enum");
      v = static_cast<T>(o.via.u64);
    } else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) {
      if (o.type != object_type::POSITIVE_INTEGER) return type_fail("an unsigned integer", o);
      if (o.via.u64 > std::numeric_limits<T>::max())
        return (void)fail(ErrorCode::bad_field_type,
                          where() + ": " + std::to_string(o.via.u64) + " does not fit");
      v = static_cast<T>(o.via.u64);
    } else if constexpr (std::is_integral_v<T>) {
      int64_t x = 0;
      if (o.type == object_type::POSITIVE_INTEGER) {
        if (o.via.u64 > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          return (void)fail(ErrorCode::bad_field_type, where() + ": integer does not fit");
        x = static_cast<int64_t>(o.via.u64);
      } else if (o.type == object_type::NEGATIVE_INTEGER) {
        x = o.via.i64;
      } else {
        return type_fail("an integer", o);
      }
      if (x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max())
        return (void)fail(ErrorCode::bad_field_type, where() + ": " + std::to_string(x) + " does not fit");
      v = static_cast<T>(x);
    } else if constexpr (std::is_floating_point_v<T>) {
      if (o.type == object_type::FLOAT32 || o.type == object_type::FLOAT64) {
        // A finite double beyond T's range has no T value (converting it is undefined): refused. NaN and
        // infinities are kept; the field's user validates the value.
        const double x = o.via.f64;
        if (std::isfinite(x) && std::fabs(x) > std::numeric_limits<T>::max())
          return (void)fail(ErrorCode::bad_field_type, where() + ": " + std::to_string(x) + " does not fit");
        v = static_cast<T>(x);
      } else if (o.type == object_type::POSITIVE_INTEGER)
        v = static_cast<T>(o.via.u64);
      else if (o.type == object_type::NEGATIVE_INTEGER)
        v = static_cast<T>(o.via.i64);
      else
        return type_fail("a number", o);
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (o.type != object_type::STR) return type_fail("a string", o);
      v.assign(o.via.str.ptr, o.via.str.size);
    } else if constexpr (std::is_same_v<T, std::vector<uint8_t>>) {
      if (o.type != object_type::BIN) return type_fail("binary", o);
      v.assign(reinterpret_cast<const uint8_t*>(o.via.bin.ptr),
               reinterpret_cast<const uint8_t*>(o.via.bin.ptr) + o.via.bin.size);
    } else if constexpr (std::is_same_v<T, BlobMap>) {
      if (o.type != object_type::MAP) return type_fail("a map", o);
      v.clear();
      for (uint32_t i = 0; i < o.via.map.size && !failed_; ++i) {
        const auto& kv = o.via.map.ptr[i];
        if (kv.key.type != object_type::STR) return type_fail("a string key", kv.key);
        std::string key(kv.key.via.str.ptr, kv.key.via.str.size);
        if (v.count(key)) return (void)fail(ErrorCode::bad_field_type, where() + ": key '" + key + "' twice");
        read_value(kv.val, v[key]);
      }
    } else if constexpr (is_vector<T>::value) {
      if (o.type != object_type::ARRAY) return type_fail("an array", o);
      v.clear();
      v.resize(o.via.array.size);
      for (uint32_t i = 0; i < o.via.array.size && !failed_; ++i) read_value(o.via.array.ptr[i], v[i]);
    } else if constexpr (is_optional<T>::value) {
      if (o.type == object_type::NIL) {
        v.reset();
        return;
      }
      v.emplace();
      read_value(o, *v);
    } else {
      read_struct(o, v);
    }
  }

  void type_fail(const char* expected, const msgpack::object& o) {
    fail(ErrorCode::bad_field_type, where() + ": expected " + expected + ", got msgpack type " +
                                        std::to_string(static_cast<int>(o.type)));
  }
  bool fail(ErrorCode code, std::string detail) {
    if (!failed_) {
      failed_ = true;
      error_ = make_error(code, std::move(detail));
    }
    return false;
  }
  std::string where() const {
    std::string s = "field '";
    for (size_t i = 0; i < path_.size(); ++i) {
      if (i) s += '.';
      s += path_[i];
    }
    return s + "'";
  }

  const msgpack::object_map* map_ = nullptr;
  std::vector<std::string_view> path_;
  bool failed_ = false;
  Error error_;
};

}  // namespace epd::protocol::detail
