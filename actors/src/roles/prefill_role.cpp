// The prefill role. A room becomes runnable when its SUBMIT (router), BOOTSTRAP (decode) and — for an image
// prompt — its embeddings (encoder) are all in, whatever order they arrive in. It then runs chunked prefill
// on the compute actor; after each chunk the completed pages go to decode's pool through the room's transfer
// worker (contiguous runs merged), and after the last chunk the aux record goes last, then KV_STATUS
// Success. A failure at any step fails exactly this room, on both sides, with its cause.
#include <spdlog/spdlog.h>

#include <cstring>

#include "epd/actors/aux_record.hpp"
#include "epd/actors/membership.hpp"
#include "epd/actors/role_support.hpp"
#include "epd/actors/roles/kv_write_plan.hpp"
#include "epd/actors/roles/prefill_compute.hpp"
#include "epd/actors/roles/roles.hpp"
#include "epd/model/kv_cache.hpp"
#include "epd/model/kv_staging.hpp"
#include "prefill_state.hpp"

namespace epd::actors::prefill {
namespace {

using protocol::Envelope;
using protocol::ErrorCode;
using protocol::make_error;
using protocol::MessageType;
constexpr uint64_t kAuxTag = ~uint64_t{0};
constexpr size_t kTombstones = 4096;  // recently ended rooms whose late messages are ignored
using giveup_atom = caf::atom_constant<caf::atom("giveup")>;

// A report held back by the report_delay_ms fault injection.
struct HeldReport {
  std::string to;
  protocol::Body body;
};

}  // namespace
}  // namespace epd::actors::prefill

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::prefill::HeldReport)

namespace epd::actors::prefill {
namespace {

// Tells a peer (the router, or decode with KV_STATUS Failed) that a room failed here; with report_delay_ms
// (fault injection) the news is held back, so tests can order reports deterministically.
void send_failure_news(PrefillState& st, const std::string& to, protocol::Body body) {
  if (st.settings.report_delay.count() > 0)
    caf::delayed_anon_send(st.me, st.settings.report_delay, HeldReport{to, std::move(body)});
  else
    st.ctx.bridge->send(to, std::move(body));
}

// Why a room that an encoder still works for is over here: its failure (the root cause, which the encoder
// passes on to the router with its retryability), or nullopt while it is still open.
std::optional<protocol::Error> ended_cause(const PrefillState& st, uint64_t id) {
  if (auto it = st.ended.find(id); it != st.ended.end()) {
    if (it->second.code == ErrorCode::ok) return make_error(ErrorCode::aborted, "room already completed");
    return it->second;
  }
  if (auto it = st.rooms.find(id); it != st.rooms.end() && it->second.state.state() == KvState::failed)
    return it->second.state.failure();
  return std::nullopt;
}

}  // namespace

void publish_load(PrefillState& st) {
  st.ctx.load->free_kv_pages = st.pages.free_count();
  st.ctx.load->total_kv_pages = st.pages.total();
  st.ctx.load->free_slots = st.slots.free_count();
  st.ctx.load->total_slots = st.slots.total();
  st.ctx.load->active_rooms = uint32_t(st.rooms.size());
  uint32_t writing = 0;
  for (const auto& [_, r] : st.rooms) writing += r.inflight;
  st.ctx.load->writes_in_flight = writing;
}

// Rooms that have not started by created + bootstrap_timeout fail; one timer, set for the earliest room,
// serves them all. A delayed message per room stayed in CAF's clock for the whole bootstrap_timeout after its
// room ended (~270 bytes each).
bool waits_for_inputs(const PrefillRoom& r) {
  return !r.started && !r.state.terminal();
}

void arm_timeout(caf::event_based_actor* self, PrefillState& st) {
  if (st.timeout_armed) return;
  std::optional<clock::time_point> due;
  for (const auto& [id, r] : st.rooms)
    if (waits_for_inputs(r) && (!due || r.created < *due)) due = r.created;
  if (!due) return;
  st.timeout_armed = true;
  const auto wait =
      std::chrono::ceil<std::chrono::milliseconds>(*due + st.settings.bootstrap_timeout - clock::now());
  self->delayed_send(self, std::max(wait, std::chrono::milliseconds(0)), timeout_atom::value);
}

PrefillRoom& room_for(caf::event_based_actor* self, PrefillState& st, uint64_t id) {
  auto [it, created] = st.rooms.try_emplace(id);
  if (created) {
    it->second.router = st.ctx.cluster->cluster.registry;
    it->second.worker = uint32_t(id % st.workers.size());
    arm_timeout(self, st);
    publish_load(st);
  }
  return it->second;
}

// Frees the room once nothing can touch its memory any more: no write in flight, no compute running, no
// encoder writing its landing slot. Sends the deferred KV_STATUS Failed / ABORT_ACK first.
void maybe_reap(PrefillState& st, uint64_t id) {
  auto it = st.rooms.find(id);
  if (it == st.rooms.end()) return;
  PrefillRoom& r = it->second;
  if (!r.state.terminal() || r.inflight > 0) return;
  if (r.state.state() == KvState::failed && !r.status_sent && !r.decode.empty()) {
    r.status_sent = true;
    if (r.ack_abort) {
      st.ctx.bridge->send(r.decode, protocol::AbortAck{id});
    } else {
      protocol::KvStatus kv;
      kv.room = id;
      kv.state = KvState::failed;
      kv.code = r.state.failure().code;
      kv.reason = r.state.failure().detail;
      send_failure_news(st, r.decode, std::move(kv));
    }
  }
  if (r.computing || r.embed_writing) return;
  release_stage_slots(st, r);
  if (r.embed_fence != 0) st.ctx.engine->revoke_writes(r.embed_fence);
  if (!r.local_pages.empty()) st.pages.free(r.local_pages);
  if (r.landing) st.slots.free(std::span<const uint32_t>(&*r.landing, 1));
  if (r.aux_src) st.aux.free(std::span<const uint32_t>(&*r.aux_src, 1));
  protocol::Error outcome =
      r.state.state() == KvState::failed ? r.state.failure() : protocol::Error{ErrorCode::ok, false, ""};
  st.rooms.erase(it);
  if (st.ended.emplace(id, std::move(outcome)).second) st.ended_order.push_back(id);
  if (st.ended_order.size() > kTombstones) {
    st.ended.erase(st.ended_order.front());
    st.ended_order.pop_front();
  }
  publish_load(st);
}

// The encoder will not report on the room's landing slot (it failed, is dead to us, or timed out): the slot
// may be reused once the encoder certainly cannot write it - its write arrives only through a receiver
// that refuses revoked grants (tcp), or its process is gone - and then the grant is revoked. A same-host
// encoder that may just be frozen (shm) keeps the slot held until it reports, restarts or dies.
void stop_waiting_for_embeddings(PrefillState& st, PrefillRoom& r) {
  const auto& engine = *st.ctx.engine;
  const auto& seg = r.encoder_segment;
  if (seg && !engine.fences_writes_from(*seg) && !engine.writer_gone(*seg)) return;
  if (r.embed_fence != 0 && !st.ctx.engine->revoke_writes(r.embed_fence)) return;  // a write is landing
  r.embed_fence = 0;
  r.embed_writing = false;
}

void fail_room(PrefillState& st, uint64_t id, protocol::Error error, bool tell_router) {
  auto it = st.rooms.find(id);
  if (it == st.rooms.end()) return;
  PrefillRoom& r = it->second;
  if (!r.state.fail(error)) return maybe_reap(st, id);  // e.g. the last write of a failed room just ended
  spdlog::warn("prefill: room {} failed: {}", id, error.to_string());
  if (tell_router) send_failure_news(st, r.router, failure_result(id, error));
  if (r.embed_writing && !r.submit.encoder.empty() && !st.ctx.bridge->peers().alive(r.submit.encoder))
    stop_waiting_for_embeddings(st, r);  // the encoder is dead to us: free the slot if it cannot write it
  // An encoder that lost the room never sends EMBED_DONE: stop waiting for it after a bound (its write,
  // if any, takes milliseconds).
  if (r.embed_writing) caf::delayed_anon_send(st.me, st.settings.bootstrap_timeout, giveup_atom::value, id);
  maybe_reap(st, id);
}

struct DecodeTarget {
  protocol::KvLayout layout;
  uint64_t kv_base = 0;
  uint64_t aux_base = 0;
  bool staged = false;  // another page format: chunks go through the decode's staging ring
};

protocol::Result<DecodeTarget> decode_target(PrefillState& st, const std::string& decode) {
  auto peer = st.ctx.bridge->peers().find(decode);
  if (!peer || !peer->segment || !peer->kv_layout)
    return make_error(ErrorCode::peer_unreachable,
                      "decode '" + decode + "' is not registered with a KV segment");
  const auto* kv = find_region(*peer->segment, kKvRegion);
  const auto* aux = find_region(*peer->segment, kAuxRegion);
  if (!kv || !aux)
    return make_error(ErrorCode::invalid_request, "decode '" + decode + "' publishes no kv/aux region");
  const auto& theirs = *peer->kv_layout;
  const bool staged = !theirs.same_page_format(st.layout);
  if (staged && (theirs.layers != st.layout.layers || theirs.kv_heads != st.layout.kv_heads ||
                 theirs.head_dim != st.layout.head_dim))
    return make_error(ErrorCode::invalid_request,
                      "decode '" + decode + "' holds KV of another model shape (" + describe_layout(theirs) +
                          " vs " + describe_layout(st.layout) + ")");
  if (staged && !find_region(*peer->segment, kStagingRegion))
    return make_error(ErrorCode::invalid_request,
                      "decode '" + decode + "' uses another KV layout (" + describe_layout(theirs) + " vs " +
                          describe_layout(st.layout) + ") and has no staging ring");
  return DecodeTarget{theirs, kv->base, aux->base, staged};
}

void maybe_start(PrefillState& st, uint64_t id) {
  PrefillRoom& r = st.rooms.at(id);
  if (r.started || r.state.terminal() || !r.have_submit || !r.have_bootstrap) return;
  const bool needs_image = r.submit.image_tokens > 0;
  if (needs_image && !r.embed_ready) return;
  const auto& prompt = r.submit.prompt;
  auto target = decode_target(st, r.decode);
  if (!target) return fail_room(st, id, target.error());
  const uint32_t need_dst = model::pages_for(target->layout, prompt.size());  // in decode's page size
  if (r.boot.dst_pages.size() != need_dst || r.boot.prompt_len != prompt.size())
    return fail_room(
        st, id,
        make_error(ErrorCode::invalid_request,
                   "BOOTSTRAP names " + std::to_string(r.boot.dst_pages.size()) + " pages for " +
                       std::to_string(r.boot.prompt_len) + " tokens; the prompt has " +
                       std::to_string(prompt.size()) + " tokens in " + std::to_string(need_dst) + " pages"));
  const uint32_t need = model::pages_for(st.layout, prompt.size());
  r.staged = target->staged;
  auto pages = st.pages.allocate(need);
  auto aux = st.aux.allocate(1);
  if (!pages || !aux) {
    if (pages) st.pages.free(*pages);
    if (aux) st.aux.free(*aux);
    return fail_room(
        st, id,
        make_error(ErrorCode::out_of_capacity, "prefill has " + std::to_string(st.pages.free_count()) +
                                                   " free pages, room needs " + std::to_string(need)));
  }
  r.local_pages = std::move(*pages);
  r.aux_src = (*aux)[0];
  r.started = true;
  r.computing = true;
  r.state.advance(KvState::transferring);
  r.transfer_start = clock::now();
  PrefillJob job;
  job.room = id;
  job.prompt = prompt;
  if (r.landing) {
    job.embeddings = reinterpret_cast<const float*>(st.embed_base + uint64_t(*r.landing) * st.slot_bytes);
    job.embedding_floats = r.embed_bytes / sizeof(float);
  }
  job.pages = r.local_pages;
  job.chunk_tokens = st.settings.chunk_tokens;
  publish_load(st);
  caf::anon_send(st.compute, std::move(job));
}

// Sends a write job through the room's worker (another live one if its worker is down); false, with the
// room failed, when no worker is alive.
bool dispatch(caf::event_based_actor* self, PrefillState& st, uint64_t id, PrefillRoom& r, TransferJob job) {
  for (size_t i = 0; i < st.workers.size() && !st.workers[r.worker]; ++i)
    r.worker = uint32_t((r.worker + 1) % st.workers.size());
  if (!st.workers[r.worker]) {
    fail_room(st, id,
              make_error(ErrorCode::worker_crashed, "no transfer worker is alive (restart budget spent)"));
    return false;
  }
  job.peer_incarnation = r.decode_inc;
  ++r.inflight;
  self->send(st.workers[r.worker], std::move(job));
  publish_load(st);
  return true;
}

void send_pages(caf::event_based_actor* self, PrefillState& st, uint64_t id, PrefillRoom& r, uint32_t upto,
                uint64_t tag) {
  if (upto <= r.pages_sent) return;
  auto target = decode_target(st, r.decode);
  if (!target) return fail_room(st, id, target.error());
  KvSide src{st.layout, st.kv_base, r.local_pages};
  KvSide dst{target->layout, target->kv_base, r.boot.dst_pages};
  auto ops = plan_kv_writes(src, dst, r.pages_sent, upto);
  for (auto& op : ops) op.fence = r.boot.fence;
  TransferJob job{id, tag, r.decode, 0, std::move(ops), caf::actor_cast<caf::actor>(self)};
  r.pages_sent = upto;
  dispatch(self, st, id, r, std::move(job));
}

void maybe_send_aux(caf::event_based_actor* self, PrefillState& st, uint64_t id, PrefillRoom& r) {
  if (!r.computed_all || r.inflight > 0 || r.aux_sent || r.state.terminal() || !staged_all_done(r)) return;
  auto target = decode_target(st, r.decode);
  if (!target) return fail_room(st, id, target.error());
  AuxRecord rec{r.first_token, 0, id};
  uint8_t* src = st.aux_base + uint64_t(*r.aux_src) * sizeof(AuxRecord);
  std::memcpy(src, &rec, sizeof rec);
  transport::WriteOp op{reinterpret_cast<uint64_t>(src),
                        target->aux_base + uint64_t(r.boot.aux_slot) * sizeof(AuxRecord), sizeof(AuxRecord),
                        r.boot.fence};
  r.aux_sent = true;
  dispatch(self, st, id, r, TransferJob{id, kAuxTag, r.decode, 0, {op}, caf::actor_cast<caf::actor>(self)});
}

void on_chunk(caf::event_based_actor* self, PrefillState& st, ChunkComputed& c) {
  auto it = st.rooms.find(c.room);
  if (it == st.rooms.end()) return;
  PrefillRoom& r = it->second;
  r.prefill_us += c.compute_us;
  if (c.last) r.computing = false;
  if (!c.ok) return fail_room(st, c.room, c.error);
  if (r.state.terminal()) return maybe_reap(st, c.room);
  if (r.staged) {
    stage_tokens(self, st, c.room, r, c.last ? uint32_t(r.submit.prompt.size()) : c.end, c.last);
  } else {
    const uint32_t complete = c.last ? uint32_t(r.local_pages.size()) : c.end / st.layout.page_size;
    send_pages(self, st, c.room, r, complete, c.chunk);
  }
  // A failure on the way may have failed the room, and an idle failed room is reaped at once.
  if (it = st.rooms.find(c.room); it == st.rooms.end() || r.state.terminal()) return;
  if (c.last) {
    r.computed_all = true;
    r.first_token = c.first_token;
    // The landing slot is no longer read by compute.
    if (r.landing && !r.embed_writing) {
      if (r.embed_fence != 0 && st.ctx.engine->revoke_writes(r.embed_fence)) r.embed_fence = 0;
      st.slots.free(std::span<const uint32_t>(&*r.landing, 1));
      r.landing.reset();
      publish_load(st);
    }
    maybe_send_aux(self, st, c.room, r);
  }
}

void on_transfer_done(caf::event_based_actor* self, PrefillState& st, TransferDone& d) {
  auto it = st.rooms.find(d.room);
  if (it == st.rooms.end()) return;
  PrefillRoom& r = it->second;
  if (r.inflight > 0) --r.inflight;
  publish_load(st);
  if (r.staged && d.tag != kAuxTag) return on_staged_write_done(self, st, r, d);
  if (!d.ok) {
    protocol::Error e = d.error;
    e.detail = "KV write to '" + r.decode + "' failed: " + e.detail;
    return fail_room(st, d.room, e);
  }
  if (r.state.terminal()) return maybe_reap(st, d.room);
  if (d.tag == kAuxTag) {
    r.transfer_us = micros_since(r.transfer_start);
    r.state.advance(KvState::success);
    protocol::KvStatus kv;
    kv.room = d.room;
    kv.state = KvState::success;
    kv.encode_us = r.encode_us;
    kv.prefill_us = r.prefill_us;
    kv.transfer_us = r.transfer_us;
    r.status_sent = true;
    st.ctx.bridge->send(r.decode, std::move(kv));
    return maybe_reap(st, d.room);
  }
  maybe_send_aux(self, st, d.room, r);
}

void on_message(caf::event_based_actor* self, PrefillState& st, Envelope& env) {
  std::visit(
      [&](auto& msg) {
        using T = std::decay_t<decltype(msg)>;
        if constexpr (std::is_same_v<T, protocol::Submit>) {
          if (msg.room == 0 || st.ended.count(msg.room)) return;
          PrefillRoom& r = room_for(self, st, msg.room);
          if (r.have_submit || r.state.terminal()) return;
          r.router = env.sender;
          r.router_inc = env.incarnation;
          const uint32_t image_tokens = model::count_image_tokens(msg.prompt);
          if (msg.prompt.empty() || msg.prompt.size() >= st.ctx.model.max_seq ||
              image_tokens != msg.image_tokens || (image_tokens > 0 && msg.encoder.empty()) ||
              msg.decode.empty())
            return fail_room(st, msg.room,
                             make_error(ErrorCode::invalid_request,
                                        "SUBMIT: prompt of " + std::to_string(msg.prompt.size()) +
                                            " tokens with " + std::to_string(image_tokens) +
                                            " image tokens (says " + std::to_string(msg.image_tokens) +
                                            "), encoder '" + msg.encoder + "', decode '" + msg.decode + "'"));
          if (r.have_bootstrap && r.decode != msg.decode)
            return fail_room(
                st, msg.room,
                make_error(ErrorCode::invalid_request,
                           "BOOTSTRAP came from '" + r.decode + "', SUBMIT names '" + msg.decode + "'"));
          r.decode = msg.decode;
          r.submit = std::move(msg);
          r.have_submit = true;
          maybe_start(st, r.submit.room);
        } else if constexpr (std::is_same_v<T, protocol::Bootstrap>) {
          if (st.ended.count(msg.room)) return;
          PrefillRoom& r = room_for(self, st, msg.room);
          if (r.have_bootstrap || r.state.terminal()) return;
          if (r.have_submit && r.decode != env.sender) {
            spdlog::warn("prefill: BOOTSTRAP for room {} from '{}', expected '{}'", msg.room, env.sender,
                         r.decode);
            return;
          }
          r.decode = env.sender;
          r.decode_inc = env.incarnation;
          r.boot = std::move(msg);
          r.have_bootstrap = true;
          r.state.advance(KvState::waiting_for_input);
          maybe_start(st, r.boot.room);
        } else if constexpr (std::is_same_v<T, protocol::EmbedMeta>) {
          // Tell the encoder, so it frees its slot now and reports the room's real cause, not "aborted".
          if (auto cause = ended_cause(st, msg.room)) {
            st.ctx.bridge->send(env.sender, protocol::EmbedPull{msg.room, 0, 0, cause->code,
                                                                "room already ended: " + cause->detail});
            return;
          }
          PrefillRoom& r = room_for(self, st, msg.room);
          if (r.landing || r.state.terminal()) return;
          const uint64_t expect = uint64_t(msg.tokens) * st.ctx.model.d_model * sizeof(float);
          if (msg.dim != st.ctx.model.d_model || msg.bytes != expect || msg.bytes > st.slot_bytes ||
              (r.have_submit && msg.tokens != r.submit.image_tokens)) {
            st.ctx.bridge->send(env.sender, protocol::EmbedPull{msg.room, 0, 0, ErrorCode::invalid_request,
                                                                "embedding shape does not match the prompt"});
            return fail_room(
                st, msg.room,
                make_error(ErrorCode::invalid_request,
                           "EMBED_META: " + std::to_string(msg.tokens) + "x" + std::to_string(msg.dim) +
                               " = " + std::to_string(msg.bytes) + " bytes does not fit this model/slot"));
          }
          auto slot = st.slots.allocate(1);
          if (!slot) {
            st.ctx.bridge->send(env.sender, protocol::EmbedPull{msg.room, 0, 0, ErrorCode::out_of_capacity,
                                                                "no free embedding slot"});
            return fail_room(st, msg.room,
                             make_error(ErrorCode::out_of_capacity, "no free embedding landing slot"));
          }
          r.landing = (*slot)[0];
          r.encoder_inc = env.incarnation;
          if (auto enc = st.ctx.bridge->peers().find(env.sender)) r.encoder_segment = enc->segment;
          const uint64_t unit = *r.landing;
          r.embed_fence = st.ctx.engine->grant_writes(reinterpret_cast<uint64_t>(st.embed_base), {&unit, 1});
          r.embed_bytes = msg.bytes;
          r.embed_writing = true;
          publish_load(st);
          const uint64_t addr =
              reinterpret_cast<uint64_t>(st.embed_base) + uint64_t(*r.landing) * st.slot_bytes;
          if (!st.ctx.bridge->send(env.sender, protocol::EmbedPull{msg.room, addr, msg.bytes, ErrorCode::ok,
                                                                   "", r.embed_fence})) {
            r.embed_writing = false;  // nobody was asked to write the slot; fail_room frees it
            return fail_room(st, msg.room,
                             make_error(ErrorCode::peer_unreachable,
                                        "encoder '" + env.sender + "' is not known here yet"));
          }
        } else if constexpr (std::is_same_v<T, protocol::EmbedDone>) {
          auto it = st.rooms.find(msg.room);
          if (it == st.rooms.end()) return;
          if (!it->second.submit.encoder.empty() && it->second.submit.encoder != env.sender) return;
          PrefillRoom& r = it->second;
          r.embed_writing = false;  // its write is over: nothing lands under the grant any more
          if (r.embed_fence != 0 && st.ctx.engine->revoke_writes(r.embed_fence)) r.embed_fence = 0;
          r.encode_us = msg.encode_us;
          if (!msg.ok)
            return fail_room(st, msg.room,
                             make_error(msg.code == ErrorCode::ok ? ErrorCode::transfer_failed : msg.code,
                                        "encoder '" + env.sender + "': " + msg.reason));
          if (r.state.terminal()) return maybe_reap(st, msg.room);
          r.embed_ready = true;
          maybe_start(st, msg.room);
        } else if constexpr (std::is_same_v<T, protocol::Abort>) {
          auto it = st.rooms.find(msg.room);
          if (it == st.rooms.end()) {
            st.ctx.bridge->send(env.sender, protocol::AbortAck{msg.room});
            return;
          }
          it->second.ack_abort = true;
          if (it->second.state.terminal()) {
            it->second.status_sent = false;  // answer this ABORT with an ACK once idle
            it->second.decode = env.sender;
            return maybe_reap(st, msg.room);
          }
          fail_room(st, msg.room, make_error(msg.code, "aborted by '" + env.sender + "': " + msg.reason),
                    false);
        } else if constexpr (std::is_same_v<T, protocol::StagingRsp>) {
          on_staging_rsp(self, st, env, msg);
        } else if constexpr (std::is_same_v<T, protocol::Watermark>) {
          on_watermark(self, st, env, msg);
        } else if constexpr (std::is_same_v<T, protocol::Cancel>) {
          fail_room(st, msg.room, make_error(ErrorCode::aborted, "cancelled: " + msg.reason), false);
        } else {
          handle_unhandled(*st.ctx.bridge, "prefill", env);
        }
      },
      env.body);
}

caf::behavior prefill_role(caf::stateful_actor<PrefillState>* self, RoleContext ctx,
                           PrefillSettings settings) {
  harden(self, "prefill");
  auto& st = self->state;
  st.ctx = std::move(ctx);
  st.settings = settings;
  st.me = caf::actor_cast<caf::actor>(self);
  st.layout = settings.layout;
  st.pages = PageAllocator(settings.kv_pages);
  st.stage_slots = PageAllocator(settings.staging_slots);
  st.stage_slot_bytes = uint64_t(settings.chunk_tokens) * model::staging_token_bytes(st.layout);
  st.stage_base = find_local_region(*st.ctx.engine, kStageSourceRegion)->base;
  st.slots = PageAllocator(settings.embed_slots);
  st.aux = PageAllocator(settings.aux_slots);
  st.slot_bytes = uint64_t(st.ctx.model.max_image_patches) * st.ctx.model.d_model * sizeof(float);
  const auto* kv = find_local_region(*st.ctx.engine, kKvRegion);
  st.kv_base = kv->addr();
  st.embed_base = find_local_region(*st.ctx.engine, kEmbedRegion)->base;
  st.aux_base = find_local_region(*st.ctx.engine, kAuxRegion)->base;
  SupervisorConfig sc = settings.transfer;
  sc.name = "prefill-transfer";
  sc.workers = settings.transfer_workers;
  auto pool = spawn_transfer_pool(self, st.ctx, sc);
  st.workers = pool.workers;
  st.supervisor = pool.supervisor;
  st.compute = spawn_prefill_compute(*st.ctx.system, st.ctx.model,
                                     model::KvPool{reinterpret_cast<std::byte*>(kv->base), st.layout},
                                     caf::actor_cast<caf::actor>(self));
  self->link_to(st.compute);
  publish_load(st);
  return {
      [=](Envelope& env) { on_message(self, self->state, env); },
      [=](ChunkComputed& c) { on_chunk(self, self->state, c); },
      [=](HeldReport& held) { self->state.ctx.bridge->send(held.to, std::move(held.body)); },
      [=](TransferDone& d) { on_transfer_done(self, self->state, d); },
      [=](stage_timeout_atom, uint64_t id, uint32_t chunk) { on_stage_timeout(self->state, id, chunk); },
      [=](timeout_atom) {
        auto& s = self->state;
        s.timeout_armed = false;
        std::vector<uint64_t> late;
        for (const auto& [id, r] : s.rooms)
          if (waits_for_inputs(r) && r.created + s.settings.bootstrap_timeout <= clock::now())
            late.push_back(id);
        for (uint64_t id : late) {
          auto it = s.rooms.find(id);
          if (it == s.rooms.end() || !waits_for_inputs(it->second)) continue;
          const auto& r = it->second;
          const char* missing = !r.have_bootstrap ? "BOOTSTRAP" : !r.have_submit ? "SUBMIT" : "embeddings";
          fail_room(s, id,
                    make_error(r.have_bootstrap ? ErrorCode::waiting_timeout : ErrorCode::bootstrap_timeout,
                               std::string(missing) + " for room " + std::to_string(id) +
                                   " did not arrive within " +
                                   std::to_string(s.settings.bootstrap_timeout.count()) + " ms"));
        }
        arm_timeout(self, s);
      },
      [=](PeerChanges& pc) {
        auto& s = self->state;
        for (const auto& c : pc.changes) {
          // A new incarnation of an encoder (restarted, or rejoined after it drained) proves the old one
          // writes no landing slot any more.
          if (c.new_incarnation != 0) {
            std::vector<uint64_t> freed;
            for (auto& [id, r] : s.rooms)
              if (r.embed_writing && r.submit.encoder == c.id && r.encoder_inc != c.new_incarnation &&
                  r.state.terminal()) {
                r.embed_writing = false;
                freed.push_back(id);
              }
            for (uint64_t id : freed) maybe_reap(s, id);
          }
          if (c.old_incarnation == 0) continue;
          s.staging.erase(c.id);  // a restarted decode starts a fresh ring
          for (auto& w : s.workers)
            if (w) self->send(w, forget_atom::value, c.id);
          // Rooms shared with the dead incarnation (or with the peer before we heard its incarnation).
          auto shared = [&](const std::string& peer, uint64_t inc) {
            return peer == c.id && (inc == 0 || inc == c.old_incarnation);
          };
          std::vector<uint64_t> affected;
          for (auto& [id, r] : s.rooms)
            if (shared(r.decode, r.decode_inc) || shared(r.router, r.router_inc) ||
                (shared(r.submit.encoder, r.encoder_inc) && !r.embed_ready))
              affected.push_back(id);
          for (uint64_t id : affected) {
            auto& r = s.rooms.at(id);
            // A new incarnation proves the old one writes nothing any more; a dead connection does not.
            if (r.submit.encoder == c.id && r.embed_writing) {
              if (c.new_incarnation != 0)
                r.embed_writing = false;
              else
                stop_waiting_for_embeddings(s, r);
            }
            if (r.decode == c.id) r.status_sent = true;  // nobody to tell
            fail_room(s, id,
                      make_error(ErrorCode::peer_died, "peer '" + c.id + "' (incarnation " +
                                                           std::to_string(c.old_incarnation) + ") " +
                                                           (c.new_incarnation ? "restarted" : "is gone")));
          }
        }
      },
      [=](WorkerCrashed& wc) {
        auto& s = self->state;
        s.workers[wc.index] = wc.replacement;
        // The rooms it held: their jobs died with it. Its sessions were closed before it went, so nothing
        // of theirs still reads our pages: fail them now (decode and router are told at once), free all.
        std::vector<uint64_t> held;
        for (auto& [id, r] : s.rooms)
          if (r.worker == wc.index && r.inflight > 0) held.push_back(id);
        spdlog::warn("prefill: transfer worker {} crashed holding {} room(s): {}", wc.index, held.size(),
                     wc.cause);
        for (uint64_t id : held) {
          auto& r = s.rooms.at(id);
          r.inflight = 0;
          publish_load(s);
          if (r.state.terminal())
            maybe_reap(s, id);
          else
            fail_room(s, id, make_error(ErrorCode::worker_crashed, "transfer worker crashed: " + wc.cause));
        }
      },
      [=](WorkerRestored& wr) { self->state.workers[wr.index] = wr.worker; },
      [=](giveup_atom, uint64_t id) {
        auto& s = self->state;
        auto it = s.rooms.find(id);
        if (it == s.rooms.end() || !it->second.embed_writing) return;
        stop_waiting_for_embeddings(s, it->second);
        if (it->second.embed_writing) {
          // Ask the encoder: it answers EMBED_DONE once it holds no write of the room (at once if it
          // does not know the room any more, e.g. after either side rejoined).
          const auto& encoder = it->second.submit.encoder;
          if (!encoder.empty() && s.ctx.bridge->peers().alive(encoder))
            s.ctx.bridge->send(encoder,
                               protocol::EmbedPull{id, 0, 0, ErrorCode::aborted,
                                                   "room ended at prefill; confirm no write is in flight"});
          spdlog::warn(
              "prefill: room {}: no EMBED_DONE from '{}' within {} ms after it failed; holding its "
              "landing slot while the encoder could still write it (shm/rdma)",
              id, it->second.submit.encoder, s.settings.bootstrap_timeout.count());
          caf::delayed_anon_send(s.me, s.settings.bootstrap_timeout, giveup_atom::value, id);
          return;
        }
        spdlog::warn(
            "prefill: room {}: no EMBED_DONE from '{}' within {} ms after it failed; freeing its slot", id,
            it->second.submit.encoder, s.settings.bootstrap_timeout.count());
        maybe_reap(s, id);
      },
  };
}

protocol::Result<RoleHandle> spawn_prefill(RoleContext& ctx) {
  PrefillSettings s;
  const auto& cfg = ctx.instance->settings;
  SettingsReader read(cfg);
  read.u32("kv_pages", s.kv_pages, 1, 1u << 24)
      .u32("chunk_tokens", s.chunk_tokens, 1, 1u << 20)
      .u32("transfer_workers", s.transfer_workers, 1, 64)
      .u32("embed_slots", s.embed_slots, 1, 1u << 16)
      .u32("aux_slots", s.aux_slots, 1, 1u << 20)
      .u32("staging_slots", s.staging_slots, 1, 1024)
      .ms("bootstrap_timeout_ms", s.bootstrap_timeout)
      .ms("staging_wait_timeout_ms", s.staging_wait_timeout)
      .ms("report_delay_ms", s.report_delay);
  if (auto st = read.status(); !st) return st.error();
  if (auto st = read_transfer_settings(cfg, s.transfer); !st) return st.error();
  auto kv_layout = kv_layout_setting(cfg, ctx.model, s.kv_pages);
  if (!kv_layout) return kv_layout.error();
  s.layout = *kv_layout;
  const auto& layout = s.layout;
  const uint64_t stage_slot_bytes = uint64_t(s.chunk_tokens) * model::staging_token_bytes(layout);
  const uint64_t slot_bytes = uint64_t(ctx.model.max_image_patches) * ctx.model.d_model * sizeof(float);
  if (auto r = ctx.engine->allocate(kKvRegion, layout.total_bytes()); !r) return r.error();
  // Fenced per landing slot: an encoder writes one only under the grant EMBED_PULL gave it.
  if (auto r = ctx.engine->allocate(kEmbedRegion, slot_bytes * s.embed_slots, slot_bytes); !r)
    return r.error();
  if (auto r = ctx.engine->allocate(kAuxRegion, uint64_t(s.aux_slots) * sizeof(AuxRecord)); !r)
    return r.error();
  if (auto r = ctx.engine->allocate(kStageSourceRegion, stage_slot_bytes * s.staging_slots); !r)
    return r.error();
  spdlog::info(
      "prefill: local KV pool of {} pages ({}), {} embedding slots of {} KiB, chunks of {} tokens, {} "
      "transfer "
      "workers, {} staging buffers of {} KiB",
      s.kv_pages, describe_layout(layout), s.embed_slots, slot_bytes >> 10, s.chunk_tokens,
      s.transfer_workers, s.staging_slots, stage_slot_bytes >> 10);
  RoleHandle h;
  h.main = ctx.system->spawn(prefill_role, ctx, s);
  h.kv_layout = layout;
  h.kv_pages_total = s.kv_pages;
  for (auto t :
       {MessageType::submit, MessageType::bootstrap, MessageType::embed_meta, MessageType::embed_done,
        MessageType::abort, MessageType::cancel, MessageType::staging_rsp, MessageType::watermark})
    ctx.bridge->subscribe(t, h.main);
  return h;
}

}  // namespace epd::actors::prefill

namespace epd::actors {

RoleSpec prefill_role_spec() {
  using namespace prefill;
  RoleSpec spec;
  spec.name = "prefill";
  spec.summary = "runs chunked prefill and writes KV pages into decode's pool";
  spec.needs_engine = true;
  spec.settings = {"kv_pages",       "chunk_tokens",  "transfer_workers",     "embed_slots",
                   "aux_slots",      "staging_slots", "bootstrap_timeout_ms", "staging_wait_timeout_ms",
                   "report_delay_ms"};
  spec.settings.insert(spec.settings.end(), std::begin(kKvLayoutSettingKeys), std::end(kKvLayoutSettingKeys));
  spec.settings.insert(spec.settings.end(), std::begin(kTransferSettingKeys), std::end(kTransferSettingKeys));
  spec.spawn = spawn_prefill;
  return spec;
}

}  // namespace epd::actors
