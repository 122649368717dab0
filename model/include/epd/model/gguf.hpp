#pragma once
// GGUF (llama.cpp's single-file checkpoint format, versions 2 and 3) read in place from a memory mapping.
// Every length and offset is checked against the mapping before it is used, and every count against the
// bytes left before anything is allocated: a truncated or hostile file gives an error, never a read outside
// the mapping. Tensor types: F32, F16, BF16 and ggml's quantized types (epd/model/tensor.hpp).
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "epd/model/mapped_file.hpp"
#include "epd/model/tensor.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model {

// GGUF's metadata value types (their numbers in the file).
enum class GgufType : uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};

inline constexpr uint32_t kGgufDefaultAlignment = 32;

// One metadata value. Scalars: integers and bools in `i` (u64 values above INT64_MAX are kept in `u`),
// floats in `f`, a string in `s`. Arrays (type == array, of `elem` scalars or strings; nested arrays are
// refused): integers/bools in `ints`, floats in `floats`, strings in `strings`.
struct GgufValue {
  GgufType type = GgufType::u8;
  GgufType elem = GgufType::u8;
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;

  bool is_integer() const;  // any integer type (not bool)
  bool is_float() const { return type == GgufType::f32 || type == GgufType::f64; }
};

std::string_view gguf_type_name(GgufType t);

class GgufFile {
 public:
  // Maps and parses the header, metadata and tensor infos (config_error naming the file and the problem).
  static protocol::Result<GgufFile> open(const std::string& path);
  // The same over bytes the caller keeps alive (the fuzz target and tests).
  static protocol::Result<GgufFile> parse(std::span<const std::byte> bytes, std::string name = "<memory>");

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;
  // Typed reads: nullopt if missing, config_error if present with another type (or out of range).
  protocol::Result<std::optional<uint64_t>> get_uint(std::string_view key) const;
  protocol::Result<std::optional<double>> get_float(std::string_view key) const;
  protocol::Result<std::optional<std::string>> get_string(std::string_view key) const;

  const std::vector<TensorRef>& tensors() const { return tensors_; }
  const TensorRef* tensor(std::string_view name) const;
  const std::string& name() const { return name_; }

 private:
  MappedFile file_;
  std::string name_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  std::map<std::string, GgufValue> kv_;
  std::vector<TensorRef> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;
};

}  // namespace epd::model
