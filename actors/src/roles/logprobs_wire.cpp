#include "roles/logprobs_wire.hpp"

#include <algorithm>

namespace epd::actors {

void append_logprobs(protocol::Logprobs& wire, const model::TokenLogprobs& token, uint32_t top) {
  if (wire.chosen.empty()) wire.top = top;
  const uint32_t have = uint32_t(std::min<size_t>(token.top.size(), top));
  if (have < wire.top) {  // cut the earlier tokens' to as many
    protocol::Logprobs cut;
    for (size_t i = 0; i < wire.chosen.size(); ++i) {
      cut.chosen.push_back(wire.chosen[i]);
      for (uint32_t j = 0; j < have; ++j) {
        cut.top_ids.push_back(wire.top_ids[i * wire.top + j]);
        cut.top_values.push_back(wire.top_values[i * wire.top + j]);
      }
    }
    cut.top = have;
    wire = std::move(cut);
  }
  wire.chosen.push_back(token.logprob);
  for (uint32_t j = 0; j < wire.top; ++j) {
    wire.top_ids.push_back(token.top[j].id);
    wire.top_values.push_back(token.top[j].logprob);
  }
}

protocol::Logprobs to_wire(std::span<const model::TokenLogprobs> tokens, uint32_t top) {
  protocol::Logprobs wire;
  for (const auto& t : tokens) append_logprobs(wire, t, top);
  return wire;
}

std::vector<model::TokenLogprobs> from_wire(const protocol::Logprobs& wire) {
  std::vector<model::TokenLogprobs> out(wire.chosen.size());
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].logprob = wire.chosen[i];
    for (uint32_t j = 0; j < wire.top; ++j)
      out[i].top.push_back({wire.top_ids[i * wire.top + j], wire.top_values[i * wire.top + j]});
  }
  return out;
}

}  // namespace epd::actors
