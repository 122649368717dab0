#pragma once
// Small helpers shared by the roles: typed settings, finding a peer's region by name, failure reports.
#include <caf/all.hpp>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "epd/actors/bridge.hpp"
#include "epd/config/settings.hpp"
#include "epd/model/config.hpp"
#include "epd/protocol/kv_layout.hpp"
#include "epd/protocol/segment.hpp"
#include "epd/transport/engine.hpp"

namespace epd::actors {

protocol::Result<uint32_t> setting_u32(const config::Settings& s, std::string_view key, uint32_t fallback,
                                       uint32_t min, uint32_t max);

// Reads a role's settings straight into its fields, each defaulting to the field's current value; the
// first bad value is kept and reported by status():
//   SettingsReader r(cfg);
//   r.u32("kv_pages", s.kv_pages, 1, 1u << 24).ms("waiting_timeout_ms", s.waiting_timeout);
//   if (auto st = r.status(); !st) return st.error();
class SettingsReader {
 public:
  explicit SettingsReader(const config::Settings& s) : s_(s) {}
  SettingsReader& u32(std::string_view key, uint32_t& field, uint32_t min, uint32_t max);
  SettingsReader& u64(std::string_view key, uint64_t& field, uint64_t min, uint64_t max);
  SettingsReader& ms(std::string_view key, std::chrono::milliseconds& field);
  protocol::Status status() const;

 private:
  template <class T, class Get>
  SettingsReader& read(T& field, Get&& get);
  const config::Settings& s_;
  std::optional<protocol::Error> error_;
};

// The KV pool layout keys prefill and decode share (docs/staging.md): kv_page_size (default: the model's),
// kv_dtype (f32 | f16 | bf16), kv_order (token_head_dim | head_token_dim).
inline constexpr const char* kKvLayoutSettingKeys[] = {"kv_page_size", "kv_dtype", "kv_order"};
protocol::Result<protocol::KvLayout> kv_layout_setting(const config::Settings& s, const model::ModelConfig& m,
                                                       uint32_t num_pages);
// "16-token pages, f32, token_head_dim" for logs and errors.
std::string describe_layout(const protocol::KvLayout& l);

const protocol::RegionDesc* find_region(const protocol::SegmentDescriptor& seg, std::string_view name);
const transport::Region* find_local_region(const transport::Engine& engine, std::string_view name);

// Tells the router that `room` failed here, with the code and reason (the router decides whether to retry).
void report_failure(Bridge& bridge, const std::string& router, uint64_t room, const protocol::Error& error);
// The RESULT that report_failure sends.
protocol::RoomResult failure_result(uint64_t room, const protocol::Error& error);

// The last branch of every role's message switch: an ERROR from a peer is logged; any other message the
// role does not handle is logged and answered with ERROR unexpected_message.
void handle_unhandled(Bridge& bridge, std::string_view role, const protocol::Envelope& env);

// Every long-lived actor calls this first: an unexpected message or an error reply is logged and dropped
// instead of CAF's defaults (print, or quit the actor), so one stray message can never stop a role.
void harden(caf::scheduled_actor* self, const std::string& name);

uint64_t micros_since(std::chrono::steady_clock::time_point t0);

}  // namespace epd::actors
