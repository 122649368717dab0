#include "epd/launcher/line_splitter.hpp"

namespace epd::launcher {
namespace {

void emit_line(std::string_view line, const LineSplitter::Emit& emit) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  emit(line);
}

}  // namespace

void LineSplitter::feed(std::string_view bytes, const Emit& emit) {
  while (!bytes.empty()) {
    size_t nl = bytes.find('\n');
    std::string_view piece = bytes.substr(0, nl);
    // Cut runaway lines: a child printing megabytes without a newline must not hold them all here.
    while (partial_.size() + piece.size() > max_line_) {
      size_t take = max_line_ - partial_.size();
      partial_.append(piece.substr(0, take));
      emit_line(partial_, emit);
      partial_.clear();
      piece.remove_prefix(take);
    }
    if (nl == std::string_view::npos) {
      partial_.append(piece);
      return;
    }
    if (partial_.empty()) {
      emit_line(piece, emit);
    } else {
      partial_.append(piece);
      emit_line(partial_, emit);
      partial_.clear();
    }
    bytes.remove_prefix(nl + 1);
  }
}

void LineSplitter::finish(const Emit& emit) {
  if (partial_.empty()) return;
  emit_line(partial_, emit);
  partial_.clear();
}

}  // namespace epd::launcher
