#pragma once
// Server-sent events, parsed incrementally: bytes arrive in arbitrary pieces (TCP reads, HTTP chunks), an
// event is complete at its blank line. Only `data:` fields matter to the OpenAI streams; the others and
// comments are skipped.
#include <functional>
#include <string>
#include <string_view>

namespace epd::bench {

class SseParser {
 public:
  using OnData = std::function<void(std::string_view data)>;

  // Feeds the next bytes; calls `on_data` with each event's data (its `data:` lines joined by '\n').
  void feed(std::string_view bytes, const OnData& on_data);
  // Bytes received but not yet part of a complete event (a stream cut mid-event leaves some).
  bool pending() const { return !line_.empty() || has_data_; }

 private:
  void line(std::string_view l, const OnData& on_data);

  std::string line_;  // the current, incomplete line
  std::string data_;  // the current event's data
  bool has_data_ = false;
  bool after_cr_ = false;  // a '\r' ended the last line: a '\n' right after it belongs to it
};

}  // namespace epd::bench
