// The safetensors reader (model/src/formats/safetensors.cpp): one shard file as epd maps it. Invariants: a
// refusal is config_error; an accepted file's tensors lie inside the input, have exactly the bytes their
// dtype and shape need, and convert to f32.
#include <vector>

#include "epd/model/safetensors.hpp"
#include "fuzz_check.hpp"

using namespace epd::model;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto c = SafetensorsCheckpoint::parse(bytes);
  if (!c) {
    FUZZ_CHECK(c.error().code == epd::protocol::ErrorCode::config_error);
    return 0;
  }
  for (const auto& [name, t] : c->tensors()) {
    FUZZ_CHECK(name == t.name);
    FUZZ_CHECK(t.bytes.data() >= bytes.data() && t.bytes.data() + t.bytes.size() <= bytes.data() + size);
    FUZZ_CHECK(t.bytes.size() == tensor_bytes(t.type, t.shape));
    if (t.elements() <= (1u << 16)) {
      std::vector<float> out(t.elements());
      FUZZ_CHECK(tensor_to_f32(t, out).ok());
    }
  }
  return 0;
}
