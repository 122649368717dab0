#include "epd/model/positions.hpp"

#include <algorithm>
#include <string>

namespace epd::model {

protocol::Result<PromptPositions> PromptPositions::make(std::span<const TokenId> prompt, TokenId image,
                                                        std::span<const ImageGrid> grids) {
  const auto bad = [](std::string why) {
    return protocol::make_error(protocol::ErrorCode::invalid_request, "image grids: " + std::move(why));
  };
  PromptPositions out;
  size_t next = 0;  // the next grid
  uint32_t lag = 0;
  for (size_t s = 0; s < prompt.size();) {
    if (prompt[s] != image) {
      ++s;
      continue;
    }
    if (next == grids.size())
      return bad("the prompt has image rows from slot " + std::to_string(s) + " beyond its " +
                 std::to_string(grids.size()) + " grids");
    const ImageGrid g = grids[next++];
    const uint64_t n = uint64_t{g.cols} * g.rows;
    if (n == 0 || n > prompt.size() - s)
      return bad("grid " + std::to_string(next - 1) + " (" + std::to_string(g.cols) + " x " +
                 std::to_string(g.rows) + ") does not fit the prompt's rows from slot " + std::to_string(s));
    for (size_t i = s; i < s + n; ++i)
      if (prompt[i] != image)
        return bad("grid " + std::to_string(next - 1) + " (" + std::to_string(g.cols) + " x " +
                   std::to_string(g.rows) + ") from slot " + std::to_string(s) + " meets text at slot " +
                   std::to_string(i));
    out.spans_.push_back(Span{uint32_t(s), g.cols, g.rows, lag});
    lag = out.spans_.back().lag_after();
    s += n;
  }
  if (next != grids.size())
    return bad(std::to_string(grids.size()) + " grids for " + std::to_string(next) + " images in the prompt");
  return out;
}

const PromptPositions::Span* PromptPositions::span_of(uint32_t slot) const {
  auto it = std::upper_bound(spans_.begin(), spans_.end(), slot,
                             [](uint32_t s, const Span& span) { return s < span.begin; });
  return it == spans_.begin() ? nullptr : &*(it - 1);
}

bool PromptPositions::is_image(uint32_t slot) const {
  const Span* span = span_of(slot);
  return span && slot < span->end();
}

RopePosition PromptPositions::at(uint32_t slot) const {
  const Span* span = span_of(slot);
  if (span && slot < span->end()) {
    const uint32_t t = span->begin - span->lag_before, i = slot - span->begin;
    return {t, t + i / span->cols, t + i % span->cols, 0};
  }
  const uint32_t p = slot - (span ? span->lag_after() : 0);
  return {p, p, p, p};
}

}  // namespace epd::model
