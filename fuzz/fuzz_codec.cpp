// The control-plane codec (protocol/src/codec.cpp): every frame a peer can send goes through decode().
// Invariants: decode never throws and refuses with a real error code; a decoded frame's header agrees with
// decode_header; re-encoding a decoded frame gives a frame that decodes, and encodes to the same bytes again
// (the codec is a fixed point after one round).
#include "epd/protocol/codec.hpp"
#include "fuzz_check.hpp"

using namespace epd::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> frame(data, size);
  const CodecLimits limits;  // production limits: the fuzzer sees what a peer would
  auto env = decode(frame, limits);
  auto header = decode_header(frame, limits);
  if (!env) {
    FUZZ_CHECK(env.error().code != ErrorCode::ok);
    return 0;
  }
  FUZZ_CHECK(header.ok());
  FUZZ_CHECK(header->type == env->type());
  FUZZ_CHECK(header->sender == env->sender);
  FUZZ_CHECK(header->incarnation == env->incarnation);
  FUZZ_CHECK(valid_instance_id(env->sender));

  const std::vector<uint8_t> bytes = encode(*env);
  FUZZ_CHECK(bytes.size() <= limits.max_frame_bytes);
  auto again = decode(bytes, limits);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->type() == env->type() && again->sender == env->sender &&
             again->incarnation == env->incarnation);
  FUZZ_CHECK(encode(*again) == bytes);
  return 0;
}
