#pragma once
// One error table for the whole system: every layer reports failures with these codes.
// docs/protocol.md lists the same table; tests check the two stay in sync.
#include <cstdint>
#include <string>
#include <string_view>

namespace epd::protocol {

enum class ErrorCode : uint16_t {
  ok = 0,
  // Wire decoding.
  bad_magic = 1,
  unsupported_version = 2,
  unknown_type = 3,
  malformed_body = 4,
  missing_field = 5,
  bad_field_type = 6,
  enum_out_of_range = 7,
  trailing_bytes = 8,
  frame_too_large = 9,
  bad_header = 10,
  // Data plane.
  out_of_range = 20,
  local_out_of_range = 21,
  bad_token = 22,
  peer_unreachable = 23,
  peer_died = 24,
  timeout = 25,
  transfer_failed = 26,
  session_closed = 27,
  no_common_backend = 28,
  injected_fault = 29,
  remote_access = 30,
  worker_crashed = 31,
  fenced = 32,
  // Control plane and rooms.
  unknown_peer = 40,
  unknown_room = 41,
  bootstrap_timeout = 42,
  waiting_timeout = 43,
  out_of_capacity = 44,
  corrupt_kv = 45,
  invalid_request = 46,
  aborted = 47,
  incarnation_changed = 48,
  oversized = 49,
  unexpected_message = 50,
  handed_over = 51,
  // Local.
  config_error = 60,
  io_error = 61,
  internal = 62,
};

struct ErrorInfo {
  ErrorCode code;
  std::string_view name;
  bool retryable;  // true: the same request may succeed if tried again (possibly elsewhere)
  std::string_view meaning;
};

// The table row for a code; unknown codes map to `internal`.
const ErrorInfo& error_info(ErrorCode code);
std::string_view error_name(ErrorCode code);
bool is_retryable(ErrorCode code);
bool is_known_error_code(uint64_t raw);
inline bool wire_enum_valid(ErrorCode, uint64_t raw) {
  return is_known_error_code(raw);
}
// Every row, in code order (for docs checks and the `errors` listing).
const ErrorInfo* error_table_begin();
const ErrorInfo* error_table_end();

// The one error type passed between layers: a code from the table, whether a retry can help, and a
// human-readable detail that names what failed (room, peer, bytes, ...).
struct Error {
  ErrorCode code = ErrorCode::internal;
  bool retryable = false;
  std::string detail;

  std::string to_string() const;
};

// An error whose retryable flag comes from the table.
Error make_error(ErrorCode code, std::string detail);

}  // namespace epd::protocol
