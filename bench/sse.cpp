#include "sse.hpp"

namespace epd::bench {

void SseParser::feed(std::string_view bytes, const OnData& on_data) {
  for (const char c : bytes) {
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      line(line_, on_data);
      line_.clear();
    } else {
      line_.push_back(c);
    }
  }
}

void SseParser::line(std::string_view l, const OnData& on_data) {
  if (l.empty()) {  // the blank line dispatches the event
    if (has_data_) on_data(data_);
    data_.clear();
    has_data_ = false;
    return;
  }
  if (l.front() == ':') return;  // a comment (keep-alive)
  const size_t colon = l.find(':');
  const std::string_view field = l.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? std::string_view{} : l.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field != "data") return;
  if (has_data_) data_.push_back('\n');
  data_.append(value);
  has_data_ = true;
}

}  // namespace epd::bench
