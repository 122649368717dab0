#pragma once
// Cuts a child's byte stream into whole lines, so a line is only ever printed complete (pipes deliver
// arbitrary fragments). Over-long lines are cut at `max_line` so a child cannot grow our memory.
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace epd::launcher {

class LineSplitter {
 public:
  using Emit = std::function<void(std::string_view line)>;

  explicit LineSplitter(size_t max_line = 16 * 1024) : max_line_(max_line ? max_line : 1) {}

  // Emits every line completed by `bytes`, without its '\n' (and without a trailing '\r').
  void feed(std::string_view bytes, const Emit& emit);
  // End of stream: emits a trailing unterminated line, if any.
  void finish(const Emit& emit);
  bool has_partial() const { return !partial_.empty(); }

 private:
  size_t max_line_;
  std::string partial_;
};

}  // namespace epd::launcher
