#pragma once
// What the HTTP front end needs from the router: generate one answer, list instances, say whether the
// router is healthy. The HTTP layer (http_api.hpp) knows nothing of actors; the router role implements this
// interface on top of its actors, and tests implement it with fakes.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "epd/protocol/messages.hpp"

namespace epd::http {

struct GenerateRequest {
  std::string prompt;              // UTF-8/bytes; tokenised byte by byte
  std::vector<uint8_t> image_ppm;  // binary PPM (P6), decoded from base64; empty = no image
  uint32_t max_tokens = 16;
};

struct StageTimings {  // milliseconds
  double encode_ms = 0;
  double prefill_ms = 0;
  double transfer_ms = 0;
  double first_token_ms = 0;  // TTFT as seen by the router
  double decode_ms = 0;
  double total_ms = 0;
};

struct GenerateResponse {
  int http_status = 200;   // 200 on success; 4xx for a bad request; 503/504/502 when serving failed
  std::string error_code;  // protocol error name, e.g. "invalid_request", "timeout"
  std::string error;       // human-readable cause
  std::string text;
  std::vector<uint32_t> tokens;
  StageTimings timings;
  uint64_t room = 0;
  uint32_t attempts = 0;
  std::string encoder, prefill, decode;  // instances that served the final attempt
};

struct InstanceView {
  std::string id;
  std::string role;
  std::string control_endpoint;
  uint64_t incarnation = 0;
  uint64_t last_seen_ms = 0;  // since the registry last heard from it
  // Its last HEARTBEAT's figures (docs/failure-handling.md explains the counters); /v1/instances lists them
  // next to the fields above. Not healthy until a heartbeat says so.
  protocol::LoadReport load{.healthy = false};
};

struct RouterStats {
  uint64_t requests = 0;
  uint64_t completed = 0;
  uint64_t failed = 0;
  uint64_t retries = 0;
  std::map<std::string, uint64_t> retry_causes;    // error code name -> rooms retried for it
  std::map<std::string, uint64_t> failure_causes;  // error code name -> requests answered with it
  // Sizes of the router's per-request tables (docs/failure-handling.md, "Bounded tables"): 0 when idle.
  std::map<std::string, uint64_t> tables;
};

class RouterService {
 public:
  virtual ~RouterService() = default;
  // Blocking, always bounded by the router's request timeout. Thread-safe (called from HTTP threads).
  virtual GenerateResponse generate(const GenerateRequest& request) = 0;
  virtual std::vector<InstanceView> instances() = 0;
  virtual RouterStats stats() = 0;
  virtual bool healthy() = 0;
};

}  // namespace epd::http
