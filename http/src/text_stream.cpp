#include "epd/http/text_stream.hpp"

#include <algorithm>
#include <utility>

#include "epd/http/utf8.hpp"

namespace epd::http {

TextStream::TextStream(std::vector<std::string> stops) {
  for (auto& s : stops) {
    if (s.empty()) continue;
    stops_.push_back(to_valid_utf8(s));
    longest_stop_ = std::max(longest_stop_, stops_.back().size());
  }
}

TextStream::Delta TextStream::push(std::string_view bytes) {
  if (stopped_ || finished_) return {"", stopped_};
  undecoded_.append(bytes);
  undecoded_.erase(0, append_utf8(undecoded_, held_, false));
  return release(false);
}

TextStream::Delta TextStream::finish() {
  if (stopped_ || finished_) return {"", stopped_};
  finished_ = true;
  append_utf8(undecoded_, held_, true);
  undecoded_.clear();
  return release(true);
}

TextStream::Delta TextStream::release(bool final) {
  // held_ had no stop in it before this call, so any occurrence now ends in the new text. The first of each
  // stop is its earliest-ending one.
  size_t cut = std::string::npos, cut_end = std::string::npos;
  for (const auto& s : stops_) {
    size_t pos = held_.find(s);
    if (pos == std::string::npos) continue;
    size_t end = pos + s.size();
    if (end < cut_end || (end == cut_end && pos < cut)) {
      cut = pos;
      cut_end = end;
    }
  }
  if (cut != std::string::npos) {
    stopped_ = true;
    matched_ = held_.substr(cut, cut_end - cut);
    Delta d{held_.substr(0, cut), true};
    held_.clear();
    undecoded_.clear();
    return d;
  }
  if (final) return {std::exchange(held_, {}), false};

  // Hold back the longest tail that some stop starts with: only there can a stop still begin. Such a tail is
  // shorter than the longest stop, so only those last bytes need a look.
  size_t keep_from = held_.size();
  for (size_t p = held_.size() - std::min(held_.size(), longest_stop_); p < held_.size(); ++p) {
    std::string_view tail = std::string_view(held_).substr(p);
    bool starts_a_stop = std::any_of(stops_.begin(), stops_.end(), [&](const std::string& s) {
      return s.size() > tail.size() && std::string_view(s).starts_with(tail);
    });
    if (starts_a_stop) {
      keep_from = p;
      break;
    }
  }
  Delta d{held_.substr(0, keep_from), false};
  held_.erase(0, keep_from);
  return d;
}

TextStream::Delta complete_text(std::string_view bytes, std::vector<std::string> stops) {
  TextStream stream(std::move(stops));
  auto d = stream.push(bytes);
  auto rest = stream.finish();
  d.text += rest.text;
  d.stopped = d.stopped || rest.stopped;
  return d;
}

}  // namespace epd::http
