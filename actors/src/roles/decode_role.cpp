// The decode role: pre-allocates KV pages for a room (BOOTSTRAP to prefill), checks the aux record when
// prefill reports Success, hands the room to the decode loop, and reports RESULT to the router. Every page
// and aux slot is freed on every terminal state; pages a prefill may still be writing are held until it
// acknowledges the ABORT (or a timeout passes).
#include <spdlog/spdlog.h>

#include <cstring>
#include <map>

#include "epd/actors/aux_record.hpp"
#include "epd/actors/membership.hpp"
#include "epd/actors/page_allocator.hpp"
#include "epd/actors/role_support.hpp"
#include "epd/actors/roles/decode_loop.hpp"
#include "epd/actors/roles/roles.hpp"
#include "epd/actors/room.hpp"
#include "epd/model/kv_cache.hpp"

namespace epd::actors {
namespace {

using clock = std::chrono::steady_clock;
using protocol::Envelope;
using protocol::ErrorCode;
using protocol::make_error;
using protocol::MessageType;
using abort_done_atom = caf::atom_constant<caf::atom("abortdone")>;

struct DecodeSettings {
  uint32_t kv_pages = 1024;
  uint32_t aux_slots = 256;
  uint32_t max_batch = 16;
  std::chrono::milliseconds waiting_timeout{30000};
  std::chrono::milliseconds abort_timeout{2000};
};

struct DecodeRoom {
  RoomState state;
  std::string router;
  std::string prefill;
  uint64_t router_inc = 0, prefill_inc = 0;  // the incarnations this room is shared with
  std::vector<uint32_t> pages;
  uint32_t aux_slot = 0;
  uint32_t prompt_len = 0;
  uint32_t max_new = 0;
  protocol::KvStatus kv;  // timings prefill reported
  clock::time_point kv_ready;
};

struct DecodeState {
  RoleContext ctx;
  DecodeSettings settings;
  protocol::KvLayout layout;
  uint8_t* aux_base = nullptr;
  PageAllocator pages{0};
  PageAllocator aux{0};
  std::map<uint64_t, DecodeRoom> rooms;
  std::map<uint64_t, DecodeRoom> quarantine;  // aborted rooms whose pages a prefill may still write
  caf::actor loop;
  static inline const char* name = "decode";
};

void publish_load(DecodeState& st) {
  st.ctx.load->free_kv_pages = st.pages.free_count();
  st.ctx.load->total_kv_pages = st.pages.total();
  st.ctx.load->active_rooms = uint32_t(st.rooms.size());
}

void release(DecodeState& st, DecodeRoom& room) {
  if (!room.pages.empty() && !st.pages.free(room.pages))
    spdlog::error("decode: page accounting broken while freeing a room (double free refused)");
  st.aux.free(std::span<const uint32_t>(&room.aux_slot, 1));
  room.pages.clear();
}

// Fails a room: tells the router, aborts it on the prefill side if prefill may still write, frees the rest.
void fail_room(caf::event_based_actor* self, DecodeState& st, uint64_t id, protocol::Error error) {
  auto it = st.rooms.find(id);
  if (it == st.rooms.end()) return;
  DecodeRoom& room = it->second;
  const bool prefill_may_write = room.state.state() == KvState::waiting_for_input;
  if (!room.state.fail(error)) return;
  spdlog::warn("decode: room {} failed: {}", id, error.to_string());
  report_failure(*st.ctx.bridge, room.router, id, error);
  if (prefill_may_write) {
    st.ctx.bridge->send(room.prefill, protocol::Abort{id, error.code, error.detail});
    st.quarantine.emplace(id, std::move(room));
    self->delayed_send(self, st.settings.abort_timeout, abort_done_atom::value, id);
  } else {
    release(st, room);
  }
  st.rooms.erase(it);
  publish_load(st);
}

void end_quarantine(DecodeState& st, uint64_t id) {
  auto it = st.quarantine.find(id);
  if (it == st.quarantine.end()) return;
  release(st, it->second);
  st.quarantine.erase(it);
  publish_load(st);
}

void on_submit(caf::event_based_actor* self, DecodeState& st, const Envelope& env,
               const protocol::Submit& s) {
  const auto& m = st.ctx.model;
  auto refuse = [&](protocol::Error e) {
    spdlog::warn("decode: refused room {}: {}", s.room, e.to_string());
    report_failure(*st.ctx.bridge, env.sender, s.room, e);
  };
  if (s.room == 0 || st.rooms.count(s.room) || st.quarantine.count(s.room))
    return refuse(make_error(ErrorCode::invalid_request, "room id " + std::to_string(s.room) + " is in use"));
  if (s.prompt.empty() || s.prompt.size() >= m.max_seq || s.max_tokens == 0 || s.prefill.empty())
    return refuse(
        make_error(ErrorCode::invalid_request, "SUBMIT needs 1.." + std::to_string(m.max_seq - 1) +
                                                   " prompt tokens, max_tokens >= 1 and a prefill instance"));
  // A prefill that is dead to us (its connection broke) may still be listed by the registry for a moment:
  // refuse at once so the router retries elsewhere, instead of waiting for a KV that never comes.
  auto prefill = st.ctx.bridge->peers().find(s.prefill);
  if (prefill && !st.ctx.bridge->peers().alive(s.prefill))
    return refuse(make_error(ErrorCode::peer_died,
                             "prefill '" + s.prefill + "' is dead to decode '" + st.ctx.instance->id + "'"));
  DecodeRoom room;
  room.router = env.sender;
  room.router_inc = env.incarnation;
  room.prefill = s.prefill;
  room.prefill_inc = prefill ? prefill->incarnation : 0;
  room.prompt_len = uint32_t(s.prompt.size());
  room.max_new = std::min<uint32_t>(s.max_tokens, m.max_seq - room.prompt_len);
  const uint32_t need = model::pages_for(st.layout, uint64_t(room.prompt_len) + room.max_new);
  auto pages = st.pages.allocate(need);
  auto slot = st.aux.allocate(1);
  if (!pages || !slot) {
    if (pages) st.pages.free(*pages);
    if (slot) st.aux.free(*slot);
    return refuse(make_error(ErrorCode::out_of_capacity,
                             "decode '" + st.ctx.instance->id + "' has " +
                                 std::to_string(st.pages.free_count()) + " free KV pages, room " +
                                 std::to_string(s.room) + " needs " + std::to_string(need)));
  }
  room.pages = std::move(*pages);
  room.aux_slot = (*slot)[0];
  std::memset(st.aux_base + uint64_t(room.aux_slot) * sizeof(AuxRecord), 0, sizeof(AuxRecord));

  protocol::Bootstrap b;
  b.room = s.room;
  const uint32_t prompt_pages = model::pages_for(st.layout, room.prompt_len);
  b.dst_pages.assign(room.pages.begin(), room.pages.begin() + prompt_pages);
  b.aux_slot = room.aux_slot;
  b.prompt_len = room.prompt_len;
  room.state.advance(KvState::waiting_for_input);
  const uint64_t id = s.room;
  st.rooms.emplace(id, std::move(room));
  publish_load(st);
  if (!st.ctx.bridge->send(s.prefill, std::move(b))) {
    fail_room(self, st, id,
              make_error(ErrorCode::peer_unreachable, "prefill '" + s.prefill + "' is not known here (yet)"));
    return;
  }
  self->delayed_send(self, st.settings.waiting_timeout, timeout_atom::value, id);
}

void on_kv_status(caf::event_based_actor* self, DecodeState& st, const Envelope& env,
                  const protocol::KvStatus& kv) {
  auto it = st.rooms.find(kv.room);
  if (it == st.rooms.end() || it->second.prefill != env.sender ||
      (it->second.prefill_inc != 0 && it->second.prefill_inc != env.incarnation)) {
    // A Failed for a room we already dropped (the router cancelled it first) is the normal race.
    if (kv.state == KvState::failed && it == st.rooms.end()) return;
    spdlog::warn("decode: KV_STATUS for room {} from '{}' does not match any room here", kv.room, env.sender);
    st.ctx.bridge->send(env.sender, protocol::ErrorReply{ErrorCode::unknown_room, "no such room here",
                                                         uint16_t(MessageType::kv_status), kv.room});
    return;
  }
  DecodeRoom& room = it->second;
  if (kv.state == KvState::failed) {
    // Prefill failed the room and holds no more writes for it.
    room.state.advance(KvState::transferring);
    fail_room(self, st, kv.room,
              make_error(kv.code == ErrorCode::ok ? ErrorCode::transfer_failed : kv.code,
                         "prefill '" + env.sender + "': " + kv.reason));
    return;
  }
  if (kv.state != KvState::success) return;  // progress reports need no action
  AuxRecord aux;
  std::memcpy(&aux, st.aux_base + uint64_t(room.aux_slot) * sizeof(AuxRecord), sizeof aux);
  if (aux.stamp != kv.room) {
    room.state.advance(KvState::transferring);
    fail_room(self, st, kv.room,
              make_error(ErrorCode::corrupt_kv, "aux stamp " + std::to_string(aux.stamp) + " != room " +
                                                    std::to_string(kv.room) + " after Success from '" +
                                                    env.sender + "'"));
    return;
  }
  if (aux.first_token >= model::kVocab) {
    room.state.advance(KvState::transferring);
    fail_room(self, st, kv.room, make_error(ErrorCode::corrupt_kv, "first token out of vocabulary"));
    return;
  }
  room.state.advance(KvState::success);
  room.kv = kv;
  room.kv_ready = clock::now();
  self->send(st.loop,
             DecodeJoin{kv.room, room.pages, room.prompt_len, aux.first_token, room.max_new, room.router});
}

void on_finished(DecodeState& st, DecodeFinished& f) {
  auto it = st.rooms.find(f.room);
  if (it == st.rooms.end()) return;
  DecodeRoom& room = it->second;
  if (f.ok) {
    protocol::RoomResult r;
    r.room = f.room;
    r.ok = true;
    r.tokens = std::move(f.tokens);
    r.encode_us = room.kv.encode_us;
    r.prefill_us = room.kv.prefill_us;
    r.transfer_us = room.kv.transfer_us;
    r.decode_us = f.decode_us;
    st.ctx.bridge->send(room.router, std::move(r));
  } else if (f.error.code != ErrorCode::aborted) {
    report_failure(*st.ctx.bridge, room.router, f.room, f.error);
  }
  release(st, room);
  st.rooms.erase(it);
  publish_load(st);
}

void on_cancel(caf::event_based_actor* self, DecodeState& st, const protocol::Cancel& c) {
  auto it = st.rooms.find(c.room);
  if (it == st.rooms.end()) return;
  if (it->second.state.state() == KvState::success) {
    self->send(st.loop, DecodeDrop{c.room});  // the loop answers with DecodeFinished(aborted)
    return;
  }
  DecodeRoom& room = it->second;
  const bool prefill_may_write = room.state.state() == KvState::waiting_for_input;
  room.state.fail(make_error(ErrorCode::aborted, c.reason));
  if (prefill_may_write) {
    st.ctx.bridge->send(room.prefill, protocol::Abort{c.room, ErrorCode::aborted, c.reason});
    st.quarantine.emplace(c.room, std::move(room));
    self->delayed_send(self, st.settings.abort_timeout, abort_done_atom::value, c.room);
  } else {
    release(st, room);
  }
  st.rooms.erase(it);
  publish_load(st);
}

caf::behavior decode_role(caf::stateful_actor<DecodeState>* self, RoleContext ctx, DecodeSettings settings) {
  harden(self, "decode");
  auto& st = self->state;
  st.ctx = std::move(ctx);
  st.settings = settings;
  st.layout = model::kv_layout_for(st.ctx.model, settings.kv_pages);
  st.pages = PageAllocator(settings.kv_pages);
  st.aux = PageAllocator(settings.aux_slots);
  const auto* kv = find_local_region(*st.ctx.engine, kKvRegion);
  const auto* aux = find_local_region(*st.ctx.engine, kAuxRegion);
  st.aux_base = aux->base;
  DecodeLoopConfig lc;
  lc.model = st.ctx.model;
  lc.pool = model::KvPool{reinterpret_cast<std::byte*>(kv->base), st.layout};
  lc.max_batch = settings.max_batch;
  st.loop = spawn_decode_loop(*st.ctx.system, st.ctx.bridge, lc, caf::actor_cast<caf::actor>(self));
  self->link_to(st.loop);
  publish_load(st);
  return {
      [=](Envelope& env) {
        auto& s = self->state;
        std::visit(
            [&](auto& msg) {
              using T = std::decay_t<decltype(msg)>;
              if constexpr (std::is_same_v<T, protocol::Submit>)
                on_submit(self, s, env, msg);
              else if constexpr (std::is_same_v<T, protocol::KvStatus>)
                on_kv_status(self, s, env, msg);
              else if constexpr (std::is_same_v<T, protocol::Cancel>)
                on_cancel(self, s, msg);
              else if constexpr (std::is_same_v<T, protocol::AbortAck>)
                end_quarantine(s, msg.room);
              else
                handle_unhandled(*s.ctx.bridge, "decode", env);
            },
            env.body);
      },
      [=](DecodeFinished& f) { on_finished(self->state, f); },
      [=](timeout_atom, uint64_t room) {
        auto& s = self->state;
        auto it = s.rooms.find(room);
        if (it != s.rooms.end() && it->second.state.state() == KvState::waiting_for_input)
          fail_room(self, s, room,
                    make_error(ErrorCode::waiting_timeout,
                               "KV for room " + std::to_string(room) + " did not arrive from '" +
                                   it->second.prefill + "' within " +
                                   std::to_string(s.settings.waiting_timeout.count()) + " ms"));
      },
      [=](abort_done_atom, uint64_t room) { end_quarantine(self->state, room); },
      [=](PeerChanges& pc) {
        auto& s = self->state;
        for (const auto& c : pc.changes) {
          if (c.old_incarnation == 0) continue;  // joined: nothing shared yet
          auto shared = [&](const std::string& peer, uint64_t inc) {
            return peer == c.id && (inc == 0 || inc == c.old_incarnation);
          };
          std::vector<uint64_t> affected;
          for (auto& [id, room] : s.rooms)
            if ((shared(room.prefill, room.prefill_inc) && room.state.state() != KvState::success) ||
                shared(room.router, room.router_inc))
              affected.push_back(id);
          if (!affected.empty())
            spdlog::warn("decode: failing {} room(s) shared with '{}' (incarnation {})", affected.size(),
                         c.id, c.old_incarnation);
          for (uint64_t id : affected)
            fail_room(self, s, id,
                      make_error(ErrorCode::peer_died, "peer '" + c.id + "' (incarnation " +
                                                           std::to_string(c.old_incarnation) + ") " +
                                                           (c.new_incarnation ? "restarted" : "is gone")));
          // Pages an aborted room's prefill might still write: released only once that prefill certainly
          // writes nothing (registry dropped it, or a new incarnation spoke); a broken connection alone
          // leaves them to ABORT_ACK or the abort timeout.
          if (!pc.confirmed) continue;
          for (auto it = s.quarantine.begin(); it != s.quarantine.end();) {
            if (shared(it->second.prefill, it->second.prefill_inc)) {
              release(s, it->second);
              it = s.quarantine.erase(it);
            } else {
              ++it;
            }
          }
          publish_load(s);
        }
      },
  };
}

protocol::Result<RoleHandle> spawn_decode(RoleContext& ctx) {
  DecodeSettings s;
  const auto& cfg = ctx.instance->settings;
  auto kv = setting_u32(cfg, "kv_pages", s.kv_pages, 1, 1u << 24);
  if (!kv) return kv.error();
  s.kv_pages = *kv;
  auto aux = setting_u32(cfg, "aux_slots", s.aux_slots, 1, 1u << 20);
  if (!aux) return aux.error();
  s.aux_slots = *aux;
  auto batch = setting_u32(cfg, "max_batch", s.max_batch, 1, 4096);
  if (!batch) return batch.error();
  s.max_batch = *batch;
  auto wt = cfg.get_ms("waiting_timeout_ms", s.waiting_timeout);
  if (!wt) return wt.error();
  s.waiting_timeout = *wt;
  auto at = cfg.get_ms("abort_timeout_ms", s.abort_timeout);
  if (!at) return at.error();
  s.abort_timeout = *at;

  const auto layout = model::kv_layout_for(ctx.model, s.kv_pages);
  if (auto r = ctx.engine->allocate(kKvRegion, layout.total_bytes()); !r) return r.error();
  if (auto r = ctx.engine->allocate(kAuxRegion, uint64_t(s.aux_slots) * sizeof(AuxRecord)); !r)
    return r.error();
  spdlog::info("decode: KV pool of {} pages ({} MiB), {} aux slots", s.kv_pages, layout.total_bytes() >> 20,
               s.aux_slots);
  RoleHandle h;
  h.main = ctx.system->spawn(decode_role, ctx, s);
  h.kv_layout = layout;
  h.kv_pages_total = s.kv_pages;
  for (auto t : {MessageType::submit, MessageType::kv_status, MessageType::cancel, MessageType::abort_ack})
    ctx.bridge->subscribe(t, h.main);
  return h;
}

}  // namespace

RoleSpec decode_role_spec() {
  RoleSpec spec;
  spec.name = "decode";
  spec.summary = "generates tokens from KV pages prefill wrote into its pool (continuous batching)";
  spec.needs_engine = true;
  spec.settings = {"kv_pages", "aux_slots", "max_batch", "waiting_timeout_ms", "abort_timeout_ms"};
  spec.spawn = spawn_decode;
  return spec;
}

}  // namespace epd::actors
