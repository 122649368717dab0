#include "epd/protocol/messages.hpp"

#include <utility>

namespace epd::protocol {

MessageType type_of(const Body& body) {
  return std::visit([](const auto& m) { return std::decay_t<decltype(m)>::kType; }, body);
}

// Each message struct names itself (kType, kName): a new message needs no entry here.
std::string_view type_name(MessageType type) {
  std::string_view name = "UNKNOWN";
  [&]<size_t... I>(std::index_sequence<I...>) {
    ((std::variant_alternative_t<I, Body>::kType == type
          ? void(name = std::variant_alternative_t<I, Body>::kName)
          : void()),
     ...);
  }
  (std::make_index_sequence<std::variant_size_v<Body>>{});
  return name;
}

bool logprobs_fit(const Logprobs& l, size_t tokens, uint32_t max_top) {
  return l.chosen.size() == tokens && l.top <= max_top && l.top_ids.size() == uint64_t{l.top} * tokens &&
         l.top_values.size() == l.top_ids.size();
}

bool is_known_type(uint64_t raw) {
  return raw <= 0xffff && type_name(static_cast<MessageType>(raw)) != "UNKNOWN";
}

}  // namespace epd::protocol
