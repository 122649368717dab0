#include "epd/actors/router/http_reply.hpp"

#include <nlohmann/json.hpp>

namespace epd::actors {
namespace {

using nlohmann::json;

// Never throws on bad UTF-8: replies must always be writable.
std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

std::string generate_reply_json(const GenerateResponse& r) {
  const auto& t = r.timings;
  json j = {
      {"text", r.text},
      {"tokens", r.tokens},
      {"room", r.room},
      {"attempts", r.attempts},
      {"instances", {{"encoder", r.encoder}, {"prefill", r.prefill}, {"decode", r.decode}}},
      {"timings_ms",
       {{"encode", t.encode_ms},
        {"prefill", t.prefill_ms},
        {"kv_transfer", t.transfer_ms},
        {"first_token", t.first_token_ms},
        {"decode", t.decode_ms},
        {"total", t.total_ms}}},
  };
  return dump(j);
}

std::string instances_json(const std::vector<InstanceView>& instances) {
  json arr = json::array();
  for (const auto& i : instances) {
    json item = {{"id", i.id},
                 {"role", i.role},
                 {"control_endpoint", i.control_endpoint},
                 {"incarnation", i.incarnation},
                 {"healthy", i.healthy},
                 {"free_kv_pages", i.free_kv_pages},
                 {"total_kv_pages", i.total_kv_pages},
                 {"free_slots", i.free_slots},
                 {"total_slots", i.total_slots},
                 {"active_rooms", i.active_rooms},
                 {"last_seen_ms", i.last_seen_ms},
                 {"worker_restarts", i.worker_restarts},
                 {"transfer_retries", i.transfer_retries},
                 {"transfer_failures", i.transfer_failures},
                 {"sessions_recycled", i.sessions_recycled},
                 {"quarantined_pages", i.quarantined_pages},
                 {"fenced_writes", i.fenced_writes}};
    if (i.staging) {
      const auto& g = *i.staging;
      item["staging"] = {{"ring_bytes", g.ring_bytes},
                         {"ring_used", g.ring_used},
                         {"ring_peak", g.ring_peak},
                         {"rounds", g.rounds},
                         {"chunks", g.chunks},
                         {"waits", g.waits},
                         {"watermarks", g.watermarks},
                         {"rejected", g.rejected},
                         {"oversized", g.oversized},
                         {"source_slots", g.source_slots},
                         {"source_slots_free", g.source_slots_free}};
    }
    arr.push_back(std::move(item));
  }
  return dump(arr);
}

std::string stats_json(const RouterStats& s) {
  return dump({{"requests", s.requests},
               {"completed", s.completed},
               {"failed", s.failed},
               {"retries", s.retries},
               {"retry_causes", json(s.retry_causes)},
               {"failure_causes", json(s.failure_causes)},
               {"tables", json(s.tables)}});
}

std::string error_json(std::string_view code, std::string_view message) {
  return dump({{"error", {{"code", code}, {"message", message}}}});
}

}  // namespace epd::actors
