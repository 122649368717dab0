#include "gguf_writer.hpp"

#include <cmath>
#include <cstring>
#include <fstream>

#include "epd/model/kv_cache.hpp"

namespace epd::model::testing {
namespace {

// GGUF value type numbers.
enum : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

void put_bytes(std::vector<std::byte>& out, const void* p, size_t n) {
  // resize + memcpy rather than insert: g++ 12 at -O3 warns falsely about insert's memmove.
  if (n == 0) return;
  const size_t at = out.size();
  out.resize(at + n);
  std::memcpy(out.data() + at, p, n);
}

void put_string(std::vector<std::byte>& out, const std::string& s) {
  const uint64_t n = s.size();
  put_bytes(out, &n, 8);
  put_bytes(out, s.data(), s.size());
}

uint64_t count(const std::vector<uint64_t>& ne) {
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;
  return n;
}

}  // namespace

template <class T>
void GgufWriter::put(std::vector<std::byte>& out, T v) const {
  put_bytes(out, &v, sizeof v);
}

void GgufWriter::key(const std::string& k, uint32_t type) {
  put_string(kv_, k);
  put(kv_, type);
  ++kv_count_;
}

template <class T>
void GgufWriter::scalar(const std::string& k, uint32_t type, T v) {
  key(k, type);
  put(kv_, v);
}

void GgufWriter::set_u8(const std::string& k, uint8_t v) {
  scalar(k, kU8, v);
}
void GgufWriter::set_i8(const std::string& k, int8_t v) {
  scalar(k, kI8, v);
}
void GgufWriter::set_u16(const std::string& k, uint16_t v) {
  scalar(k, kU16, v);
}
void GgufWriter::set_i16(const std::string& k, int16_t v) {
  scalar(k, kI16, v);
}
void GgufWriter::set_u32(const std::string& k, uint32_t v) {
  scalar(k, kU32, v);
  if (k == "general.alignment") alignment_ = v;
}
void GgufWriter::set_i32(const std::string& k, int32_t v) {
  scalar(k, kI32, v);
}
void GgufWriter::set_u64(const std::string& k, uint64_t v) {
  scalar(k, kU64, v);
}
void GgufWriter::set_i64(const std::string& k, int64_t v) {
  scalar(k, kI64, v);
}
void GgufWriter::set_f32(const std::string& k, float v) {
  scalar(k, kF32, v);
}
void GgufWriter::set_f64(const std::string& k, double v) {
  scalar(k, kF64, v);
}
void GgufWriter::set_bool(const std::string& k, bool v) {
  scalar(k, kBool, uint8_t{v ? uint8_t{1} : uint8_t{0}});
}

void GgufWriter::set_string(const std::string& k, const std::string& v) {
  key(k, kString);
  put_string(kv_, v);
}

void GgufWriter::set_strings(const std::string& k, const std::vector<std::string>& v) {
  key(k, kArray);
  put(kv_, kString);
  put(kv_, uint64_t{v.size()});
  for (const auto& s : v) put_string(kv_, s);
}

void GgufWriter::set_f32s(const std::string& k, std::span<const float> v) {
  key(k, kArray);
  put(kv_, kF32);
  put(kv_, uint64_t{v.size()});
  put_bytes(kv_, v.data(), v.size_bytes());
}

void GgufWriter::set_i32s(const std::string& k, std::span<const int32_t> v) {
  key(k, kArray);
  put(kv_, kI32);
  put(kv_, uint64_t{v.size()});
  put_bytes(kv_, v.data(), v.size_bytes());
}

void GgufWriter::set_u32s(const std::string& k, std::span<const uint32_t> v) {
  key(k, kArray);
  put(kv_, kU32);
  put(kv_, uint64_t{v.size()});
  put_bytes(kv_, v.data(), v.size_bytes());
}

void GgufWriter::add_f32(const std::string& name, std::vector<uint64_t> ne, std::span<const float> data) {
  std::vector<std::byte> p;
  put_bytes(p, data.data(), std::min<uint64_t>(count(ne), data.size()) * 4);
  add_raw(name, std::move(ne), 0, std::move(p));
}

void GgufWriter::add_f16(const std::string& name, std::vector<uint64_t> ne, std::span<const float> data) {
  std::vector<std::byte> p;
  for (uint64_t i = 0; i < std::min<uint64_t>(count(ne), data.size()); ++i) put(p, f32_to_f16(data[i]));
  add_raw(name, std::move(ne), 1, std::move(p));
}

void GgufWriter::add_q8_0(const std::string& name, std::vector<uint64_t> ne, std::span<const float> data) {
  std::vector<std::byte> p;
  const uint64_t n = std::min<uint64_t>(count(ne), data.size());
  for (uint64_t b = 0; b + 32 <= n; b += 32) {
    float amax = 0;
    for (uint64_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(data[b + i]));
    const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    put(p, f32_to_f16(d));
    for (uint64_t i = 0; i < 32; ++i) put(p, static_cast<int8_t>(std::lround(data[b + i] * id)));
  }
  add_raw(name, std::move(ne), 8, std::move(p));
}

void GgufWriter::add_raw(const std::string& name, std::vector<uint64_t> ne, uint32_t ggml_type,
                         std::vector<std::byte> payload) {
  tensors_.push_back(Tensor{name, std::move(ne), ggml_type, std::move(payload)});
}

std::vector<std::byte> GgufWriter::bytes() const {
  std::vector<std::byte> out;
  put_bytes(out, "GGUF", 4);
  put(out, uint32_t{3});
  put(out, uint64_t{tensors_.size()});
  put(out, kv_count_);
  put_bytes(out, kv_.data(), kv_.size());
  auto align = [this](uint64_t x) { return (x + alignment_ - 1) / alignment_ * alignment_; };
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    put_string(out, t.name);
    put(out, uint32_t(t.ne.size()));
    for (uint64_t d : t.ne) put(out, d);
    put(out, t.type);
    put(out, offset);
    offset = align(offset + t.payload.size());
  }
  out.resize(align(out.size()));
  for (const Tensor& t : tensors_) {
    put_bytes(out, t.payload.data(), t.payload.size());
    out.resize(align(out.size()));
  }
  return out;
}

protocol::Status GgufWriter::write(const std::string& path) const {
  const auto b = bytes();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!f) return protocol::make_error(protocol::ErrorCode::io_error, "cannot write " + path);
  return {};
}

}  // namespace epd::model::testing
