#include "epd/protocol/errors.hpp"

#include <algorithm>
#include <array>

namespace epd::protocol {
namespace {

using C = ErrorCode;
constexpr std::array kTable = {
    ErrorInfo{C::ok, "ok", false, "no error"},
    ErrorInfo{C::bad_magic, "bad_magic", false, "frame does not start with \"EPD1\""},
    ErrorInfo{C::unsupported_version, "unsupported_version", false, "envelope version not spoken here"},
    ErrorInfo{C::unknown_type, "unknown_type", false, "message type not known to this version"},
    ErrorInfo{C::malformed_body, "malformed_body", false,
              "body is not valid msgpack or exceeds decode limits"},
    ErrorInfo{C::missing_field, "missing_field", false, "a required field is absent"},
    ErrorInfo{C::bad_field_type, "bad_field_type", false, "a field has the wrong type or does not fit"},
    ErrorInfo{C::enum_out_of_range, "enum_out_of_range", false, "an enum field holds an undefined value"},
    ErrorInfo{C::trailing_bytes, "trailing_bytes", false, "bytes follow the body"},
    ErrorInfo{C::frame_too_large, "frame_too_large", false, "frame exceeds the configured maximum size"},
    ErrorInfo{C::bad_header, "bad_header", false, "envelope header is truncated or inconsistent"},
    ErrorInfo{C::out_of_range, "out_of_range", false, "remote range is not inside one registered region"},
    ErrorInfo{C::local_out_of_range, "local_out_of_range", false,
              "local source range is not inside one registered region"},
    ErrorInfo{C::bad_token, "bad_token", false, "segment token does not match the target's"},
    ErrorInfo{C::peer_unreachable, "peer_unreachable", true, "could not connect to the peer"},
    ErrorInfo{C::peer_died, "peer_died", true, "connection to the peer was lost mid-transfer"},
    ErrorInfo{C::timeout, "timeout", true, "operation did not complete within its bound"},
    ErrorInfo{C::transfer_failed, "transfer_failed", true, "the backend failed to move the bytes"},
    ErrorInfo{C::session_closed, "session_closed", true, "the session was closed before completion"},
    ErrorInfo{C::no_common_backend, "no_common_backend", false, "the two ends share no transfer backend"},
    ErrorInfo{C::injected_fault, "injected_fault", true, "failure injected by the fault backend"},
    ErrorInfo{C::remote_access, "remote_access", true, "the target refused the access (RDMA remote access)"},
    ErrorInfo{C::worker_crashed, "worker_crashed", true, "the transfer worker owning the room crashed"},
    ErrorInfo{C::fenced, "fenced", false,
              "the receiver revoked the writer's grant for the target memory (a stale writer)"},
    ErrorInfo{C::unknown_peer, "unknown_peer", false, "no registered instance has this id"},
    ErrorInfo{C::unknown_room, "unknown_room", false, "no room with this id is known here"},
    ErrorInfo{C::bootstrap_timeout, "bootstrap_timeout", true,
              "the peer's pre-allocation did not arrive in time"},
    ErrorInfo{C::waiting_timeout, "waiting_timeout", true, "inputs or transfers did not arrive in time"},
    ErrorInfo{C::out_of_capacity, "out_of_capacity", true, "no free KV pages or landing slots"},
    ErrorInfo{C::corrupt_kv, "corrupt_kv", true, "the aux record's room stamp does not match"},
    ErrorInfo{C::invalid_request, "invalid_request", false, "the request itself is invalid"},
    ErrorInfo{C::aborted, "aborted", false, "the room was cancelled"},
    ErrorInfo{C::incarnation_changed, "incarnation_changed", true,
              "the peer restarted with a new incarnation"},
    ErrorInfo{C::oversized, "oversized", false, "the item can never fit the receiver's buffer"},
    ErrorInfo{C::unexpected_message, "unexpected_message", false,
              "well-formed message not valid in this state"},
    ErrorInfo{C::handed_over, "handed_over", true,
              "the instance is stopping: the room goes on elsewhere from the tokens drawn so far"},
    ErrorInfo{C::config_error, "config_error", false, "configuration is missing or invalid"},
    ErrorInfo{C::io_error, "io_error", true, "an operating-system call failed"},
    ErrorInfo{C::internal, "internal", false, "a bug: an invariant did not hold"},
};

}  // namespace

const ErrorInfo* error_table_begin() {
  return kTable.data();
}
const ErrorInfo* error_table_end() {
  return kTable.data() + kTable.size();
}

const ErrorInfo& error_info(ErrorCode code) {
  auto it = std::find_if(kTable.begin(), kTable.end(), [code](const ErrorInfo& e) { return e.code == code; });
  if (it == kTable.end()) return error_info(ErrorCode::internal);
  return *it;
}

std::string_view error_name(ErrorCode code) {
  return error_info(code).name;
}
bool is_retryable(ErrorCode code) {
  return error_info(code).retryable;
}

bool is_known_error_code(uint64_t raw) {
  return std::any_of(kTable.begin(), kTable.end(),
                     [raw](const ErrorInfo& e) { return static_cast<uint64_t>(e.code) == raw; });
}

std::string Error::to_string() const {
  std::string s{error_name(code)};
  s += retryable ? " (retryable)" : " (fatal)";
  if (!detail.empty()) {
    s += ": ";
    s += detail;
  }
  return s;
}

Error make_error(ErrorCode code, std::string detail) {
  return Error{code, is_retryable(code), std::move(detail)};
}

}  // namespace epd::protocol
