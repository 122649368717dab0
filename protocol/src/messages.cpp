#include "epd/protocol/messages.hpp"

namespace epd::protocol {

MessageType type_of(const Body& body) {
  return std::visit([](const auto& m) { return std::decay_t<decltype(m)>::kType; }, body);
}

std::string_view type_name(MessageType type) {
  switch (type) {
    case MessageType::hello:
      return "HELLO";
    case MessageType::hello_ack:
      return "HELLO_ACK";
    case MessageType::peers:
      return "PEERS";
    case MessageType::heartbeat:
      return "HEARTBEAT";
    case MessageType::goodbye:
      return "GOODBYE";
    case MessageType::bootstrap:
      return "BOOTSTRAP";
    case MessageType::kv_status:
      return "KV_STATUS";
    case MessageType::chunk_ready:
      return "CHUNK_READY";
    case MessageType::abort:
      return "ABORT";
    case MessageType::abort_ack:
      return "ABORT_ACK";
    case MessageType::staging_req:
      return "STAGING_REQ";
    case MessageType::staging_rsp:
      return "STAGING_RSP";
    case MessageType::watermark:
      return "WATERMARK";
    case MessageType::embed_meta:
      return "EMBED_META";
    case MessageType::embed_pull:
      return "EMBED_PULL";
    case MessageType::embed_done:
      return "EMBED_DONE";
    case MessageType::submit:
      return "SUBMIT";
    case MessageType::tokens:
      return "TOKENS";
    case MessageType::result:
      return "RESULT";
    case MessageType::cancel:
      return "CANCEL";
    case MessageType::error:
      return "ERROR";
  }
  return "UNKNOWN";
}

bool is_known_type(uint64_t raw) {
  return raw <= 0xffff && type_name(static_cast<MessageType>(raw)) != "UNKNOWN";
}

}  // namespace epd::protocol
