#pragma once
// Plain value types of the data plane.
#include <cstdint>

#include "epd/protocol/errors.hpp"
#include "epd/protocol/result.hpp"

namespace epd::transport {

using protocol::Error;
using protocol::ErrorCode;
using protocol::make_error;
using protocol::Result;
using protocol::Status;

// One write of a batch: `len` bytes from my address `local_addr` (inside one of my engine's regions) to the
// peer's address `remote_addr` (inside one of the peer's registered regions).
struct WriteOp {
  uint64_t local_addr = 0;
  uint64_t remote_addr = 0;
  uint64_t len = 0;
  uint64_t fence = 0;  // the key the receiver granted for the target units (fence.hpp); 0: unfenced target
};

}  // namespace epd::transport
