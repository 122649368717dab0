// The segment descriptor (protocol/include/epd/protocol/segment.hpp) as a peer publishes it in HELLO, and the
// tcp backend's connection info inside it (transport/backends/tcp/tcp_info.hpp), decoded with the limits
// transport::decode_info uses. Invariants: a decoded descriptor re-encodes and decodes to an equal one; a
// decoded TcpInfo likewise.
#include "epd/protocol/codec.hpp"
#include "epd/protocol/segment.hpp"
#include "epd/transport/backend_info.hpp"
#include "fuzz_check.hpp"
#include "tcp/tcp_info.hpp"

using namespace epd::protocol;

namespace {

template <class T>
void round_trip(const T& value, const CodecLimits& limits) {
  const std::vector<uint8_t> bytes = encode_value(value);
  auto again = decode_value<T>(bytes, limits);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(*again == value);
  FUZZ_CHECK(encode_value(*again) == bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  const CodecLimits limits;
  if (auto seg = decode_value<SegmentDescriptor>(bytes, limits)) {
    round_trip(*seg, limits);
    // What the tcp backend does with a peer's descriptor (TcpBackend::can_reach and connect).
    if (auto info = epd::transport::decode_info<epd::transport::tcp::TcpInfo>(*seg, "tcp"))
      round_trip(*info, limits);
  } else {
    FUZZ_CHECK(seg.error().code != ErrorCode::ok);
  }
  // The blob alone, as the backend would see it.
  if (auto info = decode_value<epd::transport::tcp::TcpInfo>(bytes, limits)) round_trip(*info, limits);
  return 0;
}
