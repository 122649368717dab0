// Prefill's staged path, for a decode whose KV layout differs (docs/staging.md). After each computed chunk
// prefill asks decode for ring space (STAGING_REQ). A chunk is written once its grant (STAGING_RSP) is in,
// the decode's WATERMARK says the space has been consumed, and a source buffer is free: it is gathered into
// that buffer, written with one bulk transfer and announced with CHUNK_READY. A chunk that may not go yet
// is simply left queued — every WATERMARK and every freed buffer pumps the queue again, so one waiting room
// never holds up the others and nothing spins.
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <algorithm>

#include "epd/actors/aux_record.hpp"
#include "epd/actors/role_support.hpp"
#include "epd/model/kv_staging.hpp"
#include "prefill_state.hpp"

namespace epd::actors::prefill {
namespace {

using protocol::ErrorCode;
using protocol::make_error;
using protocol::MessageType;

StagingGauge& gauge(PrefillState& st) {
  st.ctx.load->staging.active = true;
  return st.ctx.load->staging;
}

void publish_slots(PrefillState& st) {
  st.ctx.load->staging.source_slots = st.stage_slots.total();
  st.ctx.load->staging.source_slots_free = st.stage_slots.free_count();
}

// Logs and answers a staging message that does not belong to any chunk waiting for it.
void reject(PrefillState& st, const protocol::Envelope& env, MessageType type, uint64_t room,
            const protocol::Error& why) {
  ++gauge(st).rejected;
  const PrefillRoom* r = st.rooms.find(room);
  spdlog::warn("prefill: rejected {} from '{}' ({}): {}", protocol::type_name(type), env.sender,
               kernel::room_tag(room, r ? std::string_view(r->submit.request_id) : std::string_view()),
               why.detail);
  st.ctx.bridge->answer(env, protocol::ErrorReply{why.code, why.detail, uint16_t(type), room});
}

// The ring of `decode` as this prefill knows it; (re)made from the registry's descriptor when the decode
// is new or restarted.
StagingTarget* target_for(PrefillState& st, const std::string& decode) {
  auto peer = st.ctx.bridge->peers().find(decode);
  if (!peer || !peer->segment) return nullptr;
  const auto* ring = find_region(*peer->segment, kStagingRegion);
  if (!ring || ring->length == 0) return nullptr;
  auto it = st.staging.find(decode);
  if (it == st.staging.end() || it->second.incarnation != peer->incarnation) {
    StagingTarget t;
    t.incarnation = peer->incarnation;
    t.base = ring->base;
    t.window = StagingWindow(ring->length);
    it = st.staging.insert_or_assign(decode, t).first;
  }
  return &it->second;
}

// Writes one chunk if everything it needs is there; otherwise leaves it queued.
void try_write(PrefillState& st, uint64_t id, PrefillRoom& r, uint32_t index, StagedChunk& c) {
  if (!c.granted || c.writing || r.state.terminal()) return;
  StagingTarget* target = target_for(st, r.decode);
  if (!target)
    return fail_room(st, id,
                     make_error(ErrorCode::peer_unreachable,
                                "decode '" + r.decode + "' no longer publishes a staging ring"));
  if (!target->window.may_write(c.position, c.bytes)) {
    if (!c.waited) {
      c.waited = true;
      ++gauge(st).waits;
    }
    return;
  }
  auto slot = st.stage_slots.allocate(1);
  if (!slot) return;  // every source buffer is being written: pumped again when one frees
  c.src_slot = (*slot)[0];
  publish_slots(st);
  std::byte* src = reinterpret_cast<std::byte*>(st.stage_base + uint64_t(*c.src_slot) * st.stage_slot_bytes);
  model::KvPool pool{reinterpret_cast<std::byte*>(st.kv_base), st.layout};
  if (auto g = model::gather_tokens(pool, r.local_pages, c.first, c.tokens, src); !g)
    return fail_room(st, id, g.error());
  c.checksum = XXH3_64bits(src, c.bytes);
  c.writing = true;
  transport::WriteOp op{reinterpret_cast<uint64_t>(src), target->base + c.grant.offset, c.bytes};
  dispatch(st, id, r, TransferJob{id, index, r.decode, 0, {op}, caf::actor_cast<caf::actor>(st.self)});
}

// Tries every queued chunk (rooms in id order, each room's chunks in order). A failed write attempt can
// fail and reap its room, so every step looks the room up again.
void pump(PrefillState& st, const std::string* only_decode = nullptr) {
  std::vector<std::pair<uint64_t, uint32_t>> queued;
  for (auto& [id, r] : st.rooms)
    if (r.staged && (!only_decode || r.decode == *only_decode))
      for (auto& [index, c] : r.chunks)
        if (c.granted && !c.writing) queued.emplace_back(id, index);
  for (auto [id, index] : queued) {
    PrefillRoom* r = st.rooms.find(id);
    if (!r) continue;
    auto ch = r->chunks.find(index);
    if (ch != r->chunks.end()) try_write(st, id, *r, index, ch->second);
  }
}

void stage_chunk(PrefillState& st, uint64_t id, PrefillRoom& r, uint32_t end, bool last) {
  if (end <= r.tokens_staged && !last) return;
  StagedChunk c;
  c.first = r.tokens_staged;
  c.tokens = end - r.tokens_staged;
  c.bytes = uint64_t(c.tokens) * model::staging_token_bytes(st.layout);
  c.last = last;
  if (c.tokens == 0) return;  // nothing new (a last chunk that ended on an earlier boundary)
  if (c.bytes > st.stage_slot_bytes)
    return fail_room(st, id, make_error(ErrorCode::internal, "staged chunk larger than a source buffer"));
  const uint32_t index = r.chunks_made++;
  r.tokens_staged = end;
  r.chunks.emplace(index, c);
  gauge(st);  // this instance stages: report it
  publish_slots(st);
  st.ctx.bridge->send(r.decode, protocol::StagingReq{id, index, c.bytes});
  st.self->delayed_send(st.self, st.settings.staging_wait_timeout, stage_timeout_atom::value, id, index);
}

}  // namespace

void stage_tokens(PrefillState& st, uint64_t id, PrefillRoom& r, uint32_t end, bool last) {
  // A computed chunk that starts after a cached prefix covers more than chunk_tokens: it goes as several,
  // each fitting a source buffer.
  while (end > r.tokens_staged + st.settings.chunk_tokens) {
    stage_chunk(st, id, r, r.tokens_staged + st.settings.chunk_tokens, false);
    const PrefillRoom* live = st.rooms.find(id);  // a failure may have reaped the room
    if (!live || live->state.terminal()) return;
  }
  stage_chunk(st, id, r, end, last);
}

void on_staging_rsp(PrefillState& st, const protocol::Envelope& env, protocol::StagingRsp& rsp) {
  PrefillRoom* found = st.rooms.find(rsp.room);
  auto bad = [&](std::string why) {
    reject(st, env, MessageType::staging_rsp, rsp.room, make_error(ErrorCode::unknown_room, std::move(why)));
  };
  if (!found) return bad("no such room here");
  PrefillRoom& r = *found;
  if (env.sender != r.decode || (r.decode_inc != 0 && env.incarnation != r.decode_inc))
    return bad("room " + std::to_string(rsp.room) + " is shared with '" + r.decode + "', not '" + env.sender +
               "'");
  auto ch = r.chunks.find(rsp.chunk);
  if (!r.staged || ch == r.chunks.end() || ch->second.granted)
    return bad("chunk " + std::to_string(rsp.chunk) + " of room " + std::to_string(rsp.room) +
               " is not waiting for staging space");
  StagedChunk& c = ch->second;
  if (rsp.status != protocol::StagingStatus::ok) {
    if (rsp.status == protocol::StagingStatus::oversized) ++gauge(st).oversized;
    return fail_room(st, rsp.room,
                     make_error(rsp.status == protocol::StagingStatus::oversized ? ErrorCode::oversized
                                                                                 : ErrorCode::out_of_capacity,
                                "decode '" + env.sender + "' refused staging space for chunk " +
                                    std::to_string(rsp.chunk) + " (" + std::to_string(c.bytes) +
                                    " bytes): " + rsp.reason));
  }
  StagingTarget* target = target_for(st, r.decode);
  if (!target)
    return fail_room(
        st, rsp.room,
        make_error(ErrorCode::peer_unreachable, "decode '" + r.decode + "' publishes no staging ring"));
  auto position = target->window.position_of(rsp, c.bytes);
  if (!position) {  // the room cannot go on: its decode named space outside its own ring
    reject(st, env, MessageType::staging_rsp, rsp.room, position.error());
    return fail_room(st, rsp.room, position.error());
  }
  c.granted = true;
  c.grant = rsp;
  c.position = *position;
  try_write(st, rsp.room, r, rsp.chunk, c);
}

void on_watermark(PrefillState& st, const protocol::Envelope& env, protocol::Watermark& w) {
  auto peer = st.ctx.bridge->peers().find(env.sender);
  StagingTarget* target = peer && peer->incarnation == env.incarnation ? target_for(st, env.sender) : nullptr;
  if (!target)
    return reject(
        st, env, MessageType::watermark, 0,
        make_error(ErrorCode::unknown_peer, "'" + env.sender + "' is not a decode with a staging ring"));
  if (auto ok = target->window.advance(w); !ok) return reject(st, env, MessageType::watermark, 0, ok.error());
  ++gauge(st).watermarks;
  pump(st, &env.sender);
}

void on_staged_write_done(PrefillState& st, PrefillRoom& r, const TransferDone& d) {
  const uint64_t id = d.room;
  auto ch = r.chunks.find(uint32_t(d.tag));
  if (ch == r.chunks.end()) return maybe_reap(st, id);
  StagedChunk& c = ch->second;
  c.writing = false;
  if (c.src_slot) st.stage_slots.free(std::span<const uint32_t>(&*c.src_slot, 1));
  c.src_slot.reset();
  publish_slots(st);
  if (!d.ok) {
    protocol::Error e = d.error;
    e.detail =
        "staged write of chunk " + std::to_string(d.tag) + " to '" + r.decode + "' failed: " + e.detail;
    fail_room(st, id, e);
  } else if (r.state.terminal()) {
    maybe_reap(st, id);
  } else {
    protocol::ChunkReady ready;
    ready.room = id;
    ready.chunk = uint32_t(d.tag);
    ready.offset = c.grant.offset;
    ready.bytes = c.bytes;
    ready.round = c.grant.round;
    ready.first_token = c.first;
    ready.tokens = c.tokens;
    ready.last = c.last;
    ready.checksum = c.checksum;
    st.ctx.bridge->send(r.decode, std::move(ready));
    ++gauge(st).chunks;
    r.chunks.erase(ch);
    maybe_send_aux(st, id, r);
  }
  pump(st);  // a source buffer is free again
}

void on_stage_timeout(PrefillState& st, uint64_t id, uint32_t chunk) {
  PrefillRoom* r = st.rooms.find(id);
  if (!r || r->state.terminal()) return;
  auto ch = r->chunks.find(chunk);
  if (ch == r->chunks.end() || ch->second.writing) return;
  const StagedChunk& c = ch->second;
  const auto* target = st.staging.count(r->decode) ? &st.staging.at(r->decode) : nullptr;
  // What it was waiting for: its grant, ring space (the watermark), or one of this prefill's source buffers.
  std::string where = "for STAGING_RSP";
  if (c.granted && target && target->window.may_write(c.position, c.bytes))
    where = "for a free staging source buffer (all " + std::to_string(st.stage_slots.total()) + " busy)";
  else if (c.granted && target)  // the rule: watermark + ring size >= position + bytes
    where = "for the watermark to reach ring position " +
            std::to_string(c.position + c.bytes - std::min(c.position + c.bytes, target->window.size())) +
            " (it is at " + std::to_string(target->window.watermark()) + ")";
  else if (c.granted)
    where = "for the watermark";
  fail_room(st, id,
            make_error(ErrorCode::waiting_timeout,
                       "staged chunk " + std::to_string(chunk) + " (" + std::to_string(c.bytes) +
                           " bytes) waited " + std::to_string(st.settings.staging_wait_timeout.count()) +
                           " ms " + where + " on decode '" + r->decode + "'"));
}

void release_stage_slots(PrefillState& st, PrefillRoom& r) {
  for (auto& [index, c] : r.chunks)
    if (c.src_slot) {
      st.stage_slots.free(std::span<const uint32_t>(&*c.src_slot, 1));
      c.src_slot.reset();
    }
  publish_slots(st);
}

}  // namespace epd::actors::prefill
