// The GGUF reader (model/src/formats/gguf.cpp): every checkpoint file epd is pointed at goes through it.
// Invariants: a refusal is config_error; an accepted file's tensors lie inside the input, have exactly the
// bytes their type and shape need, and convert to f32.
#include <vector>

#include "epd/model/gguf.hpp"
#include "fuzz_check.hpp"

using namespace epd::model;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto g = GgufFile::parse(bytes);
  if (!g) {
    FUZZ_CHECK(g.error().code == epd::protocol::ErrorCode::config_error);
    return 0;
  }
  FUZZ_CHECK(g->version() == 2 || g->version() == 3);
  FUZZ_CHECK(g->alignment() > 0 && (g->alignment() & (g->alignment() - 1)) == 0);
  for (const TensorRef& t : g->tensors()) {
    FUZZ_CHECK(t.bytes.data() >= bytes.data() && t.bytes.data() + t.bytes.size() <= bytes.data() + size);
    FUZZ_CHECK(t.bytes.size() == tensor_bytes(t.type, t.shape));
    FUZZ_CHECK(g->tensor(t.name) != nullptr);
    if (t.elements() <= (1u << 16)) {
      std::vector<float> out(t.elements());
      FUZZ_CHECK(tensor_to_f32(t, out).ok());
    }
  }
  return 0;
}
