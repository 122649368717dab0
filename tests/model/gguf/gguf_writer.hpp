#pragma once
// Writes GGUF v3 files for tests: metadata of every GGUF scalar type, arrays of strings / f32 / i32 / u32,
// and tensors (F32, F16, Q8_0) in ggml dimension order. The test-side twin of epd's reader
// (epd/model/gguf.hpp), written from the format's description so the two are independent.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "epd/protocol/result.hpp"

namespace epd::model::testing {

class GgufWriter {
 public:
  // Metadata, in insertion order (setting a key twice writes it twice: tests of duplicate keys use that).
  void set_u8(const std::string& key, uint8_t v);
  void set_i8(const std::string& key, int8_t v);
  void set_u16(const std::string& key, uint16_t v);
  void set_i16(const std::string& key, int16_t v);
  void set_u32(const std::string& key, uint32_t v);  // general.alignment is a u32 and sets the alignment
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_i64(const std::string& key, int64_t v);
  void set_f32(const std::string& key, float v);
  void set_f64(const std::string& key, double v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_strings(const std::string& key, const std::vector<std::string>& v);
  void set_f32s(const std::string& key, std::span<const float> v);
  void set_i32s(const std::string& key, std::span<const int32_t> v);
  void set_u32s(const std::string& key, std::span<const uint32_t> v);

  // Tensors. `ne` is in ggml order: ne[0] is the innermost (contiguous) dimension, so a PyTorch [out, in]
  // matrix has ne = {in, out}. `data` holds ne[0]*ne[1]*... floats, row-major.
  void add_f32(const std::string& name, std::vector<uint64_t> ne, std::span<const float> data);
  void add_f16(const std::string& name, std::vector<uint64_t> ne, std::span<const float> data);
  // ggml's Q8_0: per 32 values d = max|x| / 127 (stored f16), q = round(x / d).
  void add_q8_0(const std::string& name, std::vector<uint64_t> ne, std::span<const float> data);
  // Any ggml type number and payload, unchecked (for tests of the reader's errors).
  void add_raw(const std::string& name, std::vector<uint64_t> ne, uint32_t ggml_type,
               std::vector<std::byte> payload);

  std::vector<std::byte> bytes() const;
  protocol::Status write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    std::vector<std::byte> payload;
  };
  void key(const std::string& k, uint32_t type);
  template <class T>
  void put(std::vector<std::byte>& out, T v) const;
  template <class T>
  void scalar(const std::string& k, uint32_t type, T v);

  std::vector<std::byte> kv_;  // the encoded metadata section
  uint64_t kv_count_ = 0;
  uint32_t alignment_ = 32;
  std::vector<Tensor> tensors_;
};

}  // namespace epd::model::testing
