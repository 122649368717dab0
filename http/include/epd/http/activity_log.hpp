#pragma once
// The last finished generations, for GET /v1/activity and the dashboard: one entry per request the router
// answered (success or failure), newest first, in a bounded ring. The HTTP layer records them where each
// route's sink gets the final answer; routes finish on several threads, so every call takes one mutex.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace epd::http {

struct ActivityEntry {
  uint64_t seq = 0;                // set by record(): 1, 2, ... in the order requests finished
  int64_t finished_unix_ms = 0;    // set by record()
  std::string request_id;          // X-Request-Id
  std::string route;               // "/v1/chat/completions", "/v1/responses", "/v1/messages", ...
  bool stream = false;             // answered as Server-Sent Events
  int status = 200;                // the status of the answer; for a failure, the status its error carries
  std::string error_code;          // "" on success; else the error body's `code`
  std::string error;               // its message, clipped by record() to kMaxErrorBytes
  double first_token_ms = 0;       // TTFT as the router saw it; 0 when no token came
  double total_ms = 0;             // the router's wall time for the request
  uint32_t prompt_tokens = 0;      // 0 when the router refused the request before building the prompt
  uint32_t completion_tokens = 0;  // tokens the client was sent (or, for /v1/generate, given)
  uint32_t attempts = 0;           // 1 + retries; 0 when no attempt was made
};

class ActivityLog {
 public:
  static constexpr size_t kMaxErrorBytes = 200;  // an error message can quote a client's input

  explicit ActivityLog(size_t capacity = 256);

  void record(ActivityEntry entry);

  struct Snapshot {
    uint64_t recorded = 0;           // entries ever recorded (the newest entry's seq)
    uint64_t completion_tokens = 0;  // summed over every entry ever recorded
    size_t capacity = 0;
    std::vector<ActivityEntry> entries;  // at most `capacity`, newest first
  };
  Snapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  const size_t capacity_;
  std::vector<ActivityEntry> ring_;  // grows to capacity_, then next_ overwrites the oldest
  size_t next_ = 0;
  uint64_t recorded_ = 0;
  uint64_t completion_tokens_ = 0;
};

// GET /v1/activity's body (docs/http-api.md).
std::string activity_json(const ActivityLog::Snapshot& snapshot);

}  // namespace epd::http
