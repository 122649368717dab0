#pragma once
// Result<T>: a value or an Error. Small on purpose; C++20 has no std::expected.
#include <cassert>
#include <utility>
#include <variant>

#include "epd/protocol/errors.hpp"

namespace epd::protocol {

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Error error) : v_(std::move(error)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    assert(ok());
    return std::get<0>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const {
    assert(!ok());
    return std::get<1>(v_);
  }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : err_(std::move(error)), failed_(true) {}

  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const Error& error() const {
    assert(failed_);
    return err_;
  }

 private:
  Error err_;
  bool failed_ = false;
};

using Status = Result<void>;

// Reads several values into fields in order, keeping the first error, for parsers of many keys:
//   FirstError e;
//   e.take(c.lanes, o.get_uint("tcp_lanes", c.lanes, 1, 64)).take(c.timeout, o.get_ms("timeout_ms",
//   c.timeout)); if (auto st = e.status(); !st) return st.error();
// Every read runs (they are pure), in order; fields after the first error are left alone.
class FirstError {
 public:
  template <class T, class U>
  FirstError& take(T& field, Result<U> read) {
    if (!error_.ok()) return *this;
    if (read)
      field = T(std::move(read.value()));
    else
      error_ = read.error();
    return *this;
  }
  const Status& status() const { return error_; }

 private:
  Status error_;
};

}  // namespace epd::protocol
