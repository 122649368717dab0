#pragma once
// TEMPORARY stand-in until the sampling branch lands.
#include <span>
#include <string>

#include "epd/model/config.hpp"
#include "epd/protocol/result.hpp"
namespace epd::model {
struct ChatTurn {
  std::string role;
  std::string text;
  bool image = false;
};
inline protocol::Result<std::string> render_chat(const ModelConfig&, std::span<const ChatTurn> turns) {
  std::string out;
  for (const auto& t : turns) out += t.role + ": " + t.text + "\n";
  return out + "assistant: ";
}
}  // namespace epd::model
