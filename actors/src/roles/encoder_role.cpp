// The encoder role: SUBMIT (image) -> encode on the compute actor into an engine-registered source slot ->
// EMBED_META to prefill -> EMBED_PULL names the landing address -> one write through the transfer worker ->
// EMBED_DONE. The source slots are one region registered once at start, never per send.
// An image seen before (same decoded pixels) is copied from the embedding cache instead of encoded; a
// prefill that still holds its embeddings answers EMBED_META with a `cached` EMBED_PULL and nothing is
// written.
#include <spdlog/spdlog.h>

#include <cstring>
#include <map>
#include <optional>

#include "cache/page_allocator.hpp"
#include "epd/actors/aux_record.hpp"
#include "epd/actors/cache/embedding_cache.hpp"
#include "epd/actors/kernel/role_kernel.hpp"
#include "epd/actors/kernel/role_settings.hpp"
#include "epd/actors/kernel/transfer_workers.hpp"
#include "epd/actors/process_metrics.hpp"
#include "epd/model/image.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/media.hpp"
#include "epd/model/runner.hpp"
#include "epd/model/vision.hpp"
#include "roles/roles.hpp"

namespace epd::actors {
namespace {

using clock = std::chrono::steady_clock;
using protocol::Envelope;
using protocol::ErrorCode;
using protocol::make_error;

struct EncoderSettings {
  uint32_t embed_slots = 16;
  uint32_t transfer_workers = 1;
  std::chrono::milliseconds waiting_timeout{10000};
  std::chrono::milliseconds encode_delay{0};  // fault injection: hold each image this long before encoding
  uint64_t embedding_cache_bytes = uint64_t{64} << 20;  // 0: every image is encoded
  SupervisorConfig transfer;
};

struct EncodeJob {
  uint64_t room = 0;
  std::vector<std::vector<uint8_t>> images;  // media items (PPMs, WAVs): their rows go to the slot in order
  float* out = nullptr;                      // source slot
  uint64_t capacity_floats = 0;
};

struct EncodeDone {
  uint64_t room = 0;
  bool ok = false;
  protocol::Error error;
  uint32_t tokens = 0;
  uint64_t encode_us = 0;
  std::optional<ContentHash> hash;  // of the decoded pixels of every image (images_hash)
  bool cache_hit = false;
};

}  // namespace
}  // namespace epd::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::EncodeJob)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::EncodeDone)

namespace epd::actors {
namespace {

// A room here: encoding -> encoded (EMBED_META sent, waiting for EMBED_PULL) -> writing -> done (erased).
// A room that fails while its write is in flight is abandoned: its slot is freed when the write ends.
// epd_rooms{state} (docs/metrics.md) lists rooms by these names, in this order.
enum class Phase { encoding, encoded, writing, abandoned };

struct EncoderRoom {
  Phase phase = Phase::encoding;
  std::string request_id;  // the client's, for the logs
  bool cancelled = false;  // by the router's CANCEL (counted once)
  std::string router;
  std::string prefill;
  uint64_t router_inc = 0, prefill_inc = 0;  // the incarnations this room is shared with
  uint32_t worker = 0;                       // the transfer worker writing it
  uint32_t slot = 0;
  uint32_t tokens = 0;
  uint64_t bytes = 0;
  uint64_t encode_us = 0;
  std::optional<ContentHash> hash;                 // sent in EMBED_META
  std::chrono::steady_clock::time_point deadline;  // prefill must ask for the embeddings by then

  bool writing() const { return phase == Phase::writing || phase == Phase::abandoned; }
  // The peers whose loss fails the room.
  std::vector<kernel::SharedPeer> shared_peers() const {
    if (phase == Phase::abandoned) return {};
    return {{prefill, prefill_inc}, {router, router_inc}};
  }
};

struct EncoderState : kernel::RoleBase {
  EncoderSettings settings;
  uint8_t* slots_base = nullptr;
  uint64_t slot_bytes = 0;
  PageAllocator slots{0};
  kernel::RoomTable<EncoderRoom> rooms{0};  // no tombstones: a late message for a room gets no answer
  kernel::TransferWorkers workers;
  caf::actor compute;
  std::shared_ptr<EmbeddingCacheStats> cache_stats = std::make_shared<EmbeddingCacheStats>();
  static inline const char* name = "encoder";
};

void publish_load(EncoderState& st) {
  st.ctx.load->free_slots = st.slots.free_count();
  st.ctx.load->total_slots = st.slots.total();
  st.ctx.load->active_rooms = uint32_t(st.rooms.size());
  uint32_t writing = 0;
  std::array<uint32_t, 4> phases{};  // by Phase
  for (const auto& [_, r] : st.rooms) {
    writing += r.writing() ? 1 : 0;
    ++phases[size_t(r.phase)];
  }
  st.ctx.load->room_phases.publish(phases);
  st.ctx.load->writes_in_flight = writing;
}

void finish(EncoderState& st, uint64_t id) {
  auto* r = st.rooms.find(id);
  if (!r) return;
  st.slots.free(std::span<const uint32_t>(&r->slot, 1));
  st.rooms.end(id);
  publish_load(st);
}

struct Notify {
  bool prefill = true;  // EMBED_DONE failed (no write of ours lands any more)
};

// Fails the room: router (and prefill) are told; the slot is freed unless a write is still reading it.
void fail_room(EncoderState& st, uint64_t id, const protocol::Error& error, Notify notify = {}) {
  auto* r = st.rooms.find(id);
  if (!r || r->phase == Phase::abandoned) return;
  kernel::announce_failure(st.bridge(), "encoder", id, r->request_id, r->router, error);
  if (r->writing()) {
    r->phase = Phase::abandoned;  // the write's completion frees it
    return;
  }
  if (notify.prefill)
    st.bridge().send(r->prefill, protocol::EmbedDone{id, false, error.code, error.detail, 0});
  finish(st, id);
}

// The one timer is set no further than waiting_timeout ahead: a room's deadline is at least that far from
// its SUBMIT, so no later room's deadline comes before it.
void arm_timeout(EncoderState& st) {
  auto due = kernel::earliest(
      st.rooms, [](const EncoderRoom& r) { return r.writing() ? std::nullopt : std::optional(r.deadline); });
  if (due) due = std::min(*due, kernel::DeadlineTimer::now(st.self) + st.settings.waiting_timeout);
  st.deadline.arm(st.self, due);
}

// Encodes (or finds in the cache) one image into its source slot. The cache lives here, on the compute
// actor's own thread: only this actor reads or writes it, and an entry is pinned while it is copied out.
caf::behavior encode_compute(caf::event_based_actor* self, model::ModelConfig cfg, caf::actor role,
                             uint64_t cache_bytes, std::shared_ptr<EmbeddingCacheStats> cache_stats) {
  harden(self, "encoder-compute");
  // The vision tower alone: the encoder holds none of the language model's weights.
  auto encoder = model::make_vision_encoder(cfg);
  if (!encoder) {
    spdlog::critical("encoder-compute: cannot build the model's encoder: {}", encoder.error().to_string());
    self->quit(caf::exit_reason::user_shutdown);
    return {};
  }
  std::shared_ptr<model::ImageEncoder> r(std::move(encoder.value()));
  const std::string tower = r->tower();
  auto cache = std::make_shared<EmbeddingCache>(cache_bytes, std::move(cache_stats));
  const uint64_t slot_limit = uint64_t(cfg.max_image_patches) * cfg.d_model * sizeof(float);
  return {
      [=](EncodeJob& job) {
        const auto t0 = clock::now();
        EncodeDone done;
        done.room = job.room;
        done.ok = true;
        done.cache_hit = true;
        std::vector<std::optional<ContentHash>> hashes;
        uint64_t used = 0;  // floats written to the slot
        for (size_t i = 0; i < job.images.size() && done.ok; ++i) {
          auto fail = [&](protocol::Error e) {
            if (job.images.size() > 1)
              e.detail = std::string(model::media_item_kind(job.images[i])) + " " + std::to_string(i) + ": " +
                         e.detail;
            done.ok = false;
            done.error = std::move(e);
          };
          auto item = model::parse_media_item(job.images[i]);
          if (!item) {
            fail(item.error());
            break;
          }
          // Each item is cached on its own (keyed by its pixels or samples and the tower), the room by all.
          hashes.push_back(cache->enabled() ? content_hash(*item) : std::nullopt);
          const auto key = images_hash(std::span(&hashes.back(), 1), tower);
          auto hit = key ? cache->find(*key) : std::optional<EmbeddingCache::Pin>();
          if (hit && used * sizeof(float) + hit->bytes().size() <= job.capacity_floats * sizeof(float)) {
            std::memcpy(job.out + used, hit->bytes().data(), hit->bytes().size());
            used += hit->bytes().size() / sizeof(float);
            done.tokens += hit->tokens();
            continue;
          }
          done.cache_hit = false;
          auto emb = model::encode_media(*r, *item);
          if (!emb) {
            fail(emb.error());
          } else if (used + emb->data.size() > job.capacity_floats) {
            fail(make_error(ErrorCode::invalid_request, "the images give more embeddings than a slot holds"));
          } else {
            const size_t bytes = emb->data.size() * sizeof(float);
            std::memcpy(job.out + used, emb->data.data(), bytes);
            used += emb->data.size();
            done.tokens += emb->tokens;
            if (key && bytes <= slot_limit)
              cache->insert(*key, {reinterpret_cast<const uint8_t*>(emb->data.data()), bytes}, emb->tokens);
          }
        }
        if (done.ok)
          done.hash = images_hash(hashes, tower);
        else
          done.cache_hit = false;
        done.encode_us = micros_since(t0);
        self->send(role, std::move(done));
      },
  };
}

void on_submit(EncoderState& st, const Envelope& env, protocol::Submit& sub) {
  auto refuse = [&](protocol::Error e) {
    spdlog::warn("encoder: refused {}: {}", kernel::room_tag(sub.room, sub.request_id), e.to_string());
    report_failure(st.bridge(), env.sender, sub.room, e);
  };
  if (sub.room == 0 || st.rooms.contains(sub.room))
    return refuse(make_error(ErrorCode::invalid_request, "room id in use"));
  if (sub.images.empty() || sub.prefill.empty())
    return refuse(
        make_error(ErrorCode::invalid_request, "SUBMIT to an encoder needs an image and a prefill"));
  auto prefill = st.bridge().peers().find(sub.prefill);
  if (!prefill || !st.bridge().peers().alive(sub.prefill))
    return refuse(make_error(ErrorCode::peer_died, "prefill '" + sub.prefill + "' is not alive here"));
  auto slot = st.slots.allocate(1);
  if (!slot) return refuse(make_error(ErrorCode::out_of_capacity, "no free embedding slot on the encoder"));
  EncoderRoom room;
  room.request_id = sub.request_id.substr(0, kernel::kMaxLoggedRequestId);
  room.router = env.sender;
  room.prefill = sub.prefill;
  room.router_inc = env.incarnation;
  room.prefill_inc = prefill->incarnation;
  room.slot = (*slot)[0];
  // Prefill asks for the embeddings when it gets to the room, which may be after other rooms queued there:
  // the router's budget bounds the wait (its timeout cancels the room here); waiting_timeout past it is for
  // a cancel that never comes.
  room.deadline = kernel::DeadlineTimer::now(st.self) + std::chrono::milliseconds(sub.budget_ms) +
                  st.settings.waiting_timeout;
  st.rooms.insert(sub.room, room);
  publish_load(st);
  spdlog::debug("encoder: {} accepted, {} image(s) for prefill '{}'",
                kernel::room_tag(sub.room, room.request_id), sub.images.size(), sub.prefill);
  EncodeJob job{sub.room, std::move(sub.images),
                reinterpret_cast<float*>(st.slots_base + uint64_t(room.slot) * st.slot_bytes),
                st.slot_bytes / sizeof(float)};
  if (st.settings.encode_delay.count() > 0)
    st.self->delayed_send(st.compute, st.settings.encode_delay, std::move(job));
  else
    st.self->send(st.compute, std::move(job));
  arm_timeout(st);
}

void on_embed_pull(EncoderState& st, const Envelope& env, protocol::EmbedPull& pull) {
  auto* r = st.rooms.find(pull.room);
  const bool from_prefill = r && r->prefill == env.sender;
  const bool ours = from_prefill && env.incarnation == r->prefill_inc;
  // Prefill gave the room up and asks whether we could still write its landing slot: a room we do not
  // hold, or hold for another prefill incarnation (our jobs carry it) with no write running, has no write
  // for it. A rejoined prefill is the same process and memory: while our write to it runs, no answer (it
  // asks again).
  if (pull.code != ErrorCode::ok && !ours) {
    if (from_prefill && r->writing()) return;
    st.bridge().answer(env, protocol::EmbedDone{pull.room, false, ErrorCode::aborted,
                                                "no write of this room is in flight here", 0});
    return;
  }
  if (!ours || r->phase != Phase::encoded) {
    spdlog::warn("encoder: unexpected EMBED_PULL for {} from '{}'",
                 kernel::room_tag(pull.room, r ? std::string_view(r->request_id) : std::string_view()),
                 env.sender);
    return;
  }
  // Prefill cannot take them (or gave the room up): fail it; EMBED_DONE tells prefill that no write of the
  // room will come from here.
  if (pull.code != ErrorCode::ok)
    return fail_room(st, pull.room, make_error(pull.code, "prefill '" + env.sender + "': " + pull.reason));
  // Prefill holds these embeddings (it learnt the hash from our EMBED_META): the room ends, nothing written.
  if (pull.cached) {
    if (!r->hash)
      return fail_room(
          st, pull.room,
          make_error(ErrorCode::unexpected_message, "cached EMBED_PULL for an image sent unhashed"));
    ++st.cache_stats->transfers_skipped;
    spdlog::debug("encoder: {} held by '{}' already: no write", kernel::room_tag(pull.room, r->request_id),
                  env.sender);
    return finish(st, pull.room);
  }
  if (pull.bytes != r->bytes)
    return fail_room(st, pull.room, make_error(ErrorCode::invalid_request, "EMBED_PULL size mismatch"));
  auto worker = st.workers.live(uint32_t(pull.room % st.workers.size()));
  if (!worker)
    return fail_room(
        st, pull.room,
        make_error(ErrorCode::worker_crashed, "no transfer worker is alive (restart budget spent)"));
  r->worker = *worker;
  r->phase = Phase::writing;
  publish_load(st);
  const uint64_t src = reinterpret_cast<uint64_t>(st.slots_base) + uint64_t(r->slot) * st.slot_bytes;
  TransferJob job{pull.room,
                  0,
                  env.sender,
                  r->prefill_inc,
                  {{src, pull.addr, pull.bytes, pull.fence}},
                  caf::actor_cast<caf::actor>(st.self)};
  st.self->send(st.workers.at(r->worker), std::move(job));
}

// A live room ends here (counted); one whose embeddings are being written ends when the write does, and
// EMBED_DONE still tells prefill that nothing more lands in its slot.
void on_cancel(EncoderState& st, const Envelope&, protocol::Cancel& cancel) {
  auto* r = st.rooms.find(cancel.room);
  if (!r || r->phase == Phase::abandoned || r->cancelled) return;
  r->cancelled = true;
  ++st.ctx.load->cancelled_rooms;
  spdlog::debug("encoder: {} cancelled: {}", kernel::room_tag(cancel.room, r->request_id), cancel.reason);
  if (!r->writing()) finish(st, cancel.room);
}

void on_encoded(EncoderState& st, EncodeDone& d) {
  auto* r = st.rooms.find(d.room);
  if (!r || r->phase != Phase::encoding) return;
  // A bad image is the request's fault: tell the router (not retryable) and prefill.
  if (!d.ok) return fail_room(st, d.room, d.error);
  r->phase = Phase::encoded;
  r->tokens = d.tokens;
  r->bytes = uint64_t(d.tokens) * st.ctx.model.d_model * sizeof(float);
  r->encode_us = d.encode_us;
  r->hash = d.hash;
  protocol::EmbedMeta meta{d.room, d.tokens, st.ctx.model.d_model, r->bytes, protocol::DType::f32, {}};
  if (d.hash) meta.content_hash.assign(d.hash->begin(), d.hash->end());
  if (d.cache_hit)
    spdlog::debug("encoder: {} found in the embedding cache ({})", kernel::room_tag(d.room, r->request_id),
                  short_hex(*d.hash));
  st.bridge().send(r->prefill, std::move(meta));
}

void on_written(EncoderState& st, TransferDone& d) {
  auto* r = st.rooms.find(d.room);
  if (!r || !r->writing()) return;
  if (r->phase == Phase::abandoned) return finish(st, d.room);
  r->phase = Phase::encoded;  // no write in flight
  publish_load(st);
  if (!d.ok) {
    protocol::Error e = d.error;
    e.detail = "embedding write to '" + r->prefill + "' failed: " + e.detail;
    return fail_room(st, d.room, e);
  }
  st.bridge().send(r->prefill, protocol::EmbedDone{d.room, true, ErrorCode::ok, "", r->encode_us});
  spdlog::debug("encoder: {} embeddings written to '{}'", kernel::room_tag(d.room, r->request_id),
                r->prefill);
  finish(st, d.room);
}

void on_deadline(EncoderState& st) {
  st.deadline.fired();
  const auto now = kernel::DeadlineTimer::now(st.self);
  for (uint64_t id :
       st.rooms.ids_where([&](uint64_t, const EncoderRoom& r) { return !r.writing() && r.deadline <= now; }))
    if (auto* r = st.rooms.find(id))
      fail_room(st, id,
                make_error(ErrorCode::waiting_timeout, "prefill '" + r->prefill + "' did not ask for room " +
                                                           std::to_string(id) + "'s embeddings in time"));
  arm_timeout(st);
}

void on_peer_changes(EncoderState& st, const PeerChanges& pc) {
  for (const auto& c : pc.changes) {
    if (c.old_incarnation == 0) continue;
    st.workers.forget_peer(st.self, c.id);
    for (uint64_t id : kernel::sharing_lost_peer(st.rooms, c))
      fail_room(st, id, kernel::peer_lost_error(c), Notify{.prefill = false});
  }
}

// The rooms whose embedding write died with the worker. Its sessions were closed before it went: nothing
// still reads their source slots. Prefill and router are told at once; the slots are freed.
void on_worker_crashed(EncoderState& st, const WorkerCrashed& wc) {
  st.workers.crashed(wc);
  auto held =
      st.rooms.ids_where([&](uint64_t, const EncoderRoom& r) { return r.worker == wc.index && r.writing(); });
  spdlog::warn("encoder: transfer worker {} crashed holding {} room(s): {}", wc.index, held.size(), wc.cause);
  for (uint64_t id : held) {
    auto* r = st.rooms.find(id);
    if (r->phase == Phase::abandoned) {
      finish(st, id);  // had failed already, waiting for the write to end
      continue;
    }
    r->phase = Phase::encoded;
    fail_room(st, id, make_error(ErrorCode::worker_crashed, "transfer worker crashed: " + wc.cause));
  }
}

using Table = kernel::MessageTable<EncoderState>;

caf::behavior encoder_role(caf::stateful_actor<EncoderState>* self, RoleContext ctx,
                           kernel::TablePtr<EncoderState> table, EncoderSettings settings) {
  auto& st = kernel::start(self, std::move(ctx));
  st.ctx.load->room_phases.declare({"encoding", "encoded", "writing", "abandoned"});
  st.settings = settings;
  st.slot_bytes = uint64_t(st.ctx.model.max_image_patches) * st.ctx.model.d_model * sizeof(float);
  st.slots_base = find_local_region(*st.ctx.engine, kEmbedRegion)->base;
  st.slots = PageAllocator(settings.embed_slots);
  SupervisorConfig sc = settings.transfer;
  sc.name = "encoder-transfer";
  sc.workers = settings.transfer_workers;
  st.workers.start(self, st.ctx, sc);
  export_embedding_cache(*st.ctx.metrics, st.cache_stats);
  st.compute =
      spawn_worker_actor(*st.ctx.system, st.ctx.detached_workers, encode_compute, st.ctx.model,
                         caf::actor_cast<caf::actor>(self), settings.embedding_cache_bytes, st.cache_stats);
  self->link_to(st.compute);
  publish_load(st);
  return kernel::role_behavior(self, table,
                               {
                                   [=](EncodeDone& d) { on_encoded(self->state, d); },
                                   [=](TransferDone& d) { on_written(self->state, d); },
                                   [=](timeout_atom) { on_deadline(self->state); },
                                   [=](PeerChanges& pc) { on_peer_changes(self->state, pc); },
                                   [=](WorkerCrashed& wc) { on_worker_crashed(self->state, wc); },
                                   [=](WorkerRestored& wr) { self->state.workers.restored(wr); },
                               });
}

protocol::Result<RoleHandle> spawn_encoder(RoleContext& ctx, EncoderSettings s) {
  const uint64_t slot_bytes = uint64_t(ctx.model.max_image_patches) * ctx.model.d_model * sizeof(float);
  if (auto r = ctx.engine->allocate(kEmbedRegion, slot_bytes * s.embed_slots); !r) return r.error();
  auto table = std::make_shared<Table>();
  table->on<protocol::Submit>(on_submit)
      .on<protocol::EmbedPull>(on_embed_pull)
      .on<protocol::Cancel>(on_cancel);
  auto main = kernel::spawn_main(ctx, encoder_role, kernel::TablePtr<EncoderState>(table), s);
  if (!main) return main.error();
  return RoleHandle{*main, std::nullopt, 0, {}, {}, {}};
}

}  // namespace

RoleSpec encoder_role_spec() {
  kernel::SettingsSchema<EncoderSettings> settings;
  settings.u32("embed_slots", &EncoderSettings::embed_slots, 1, 1u << 16)
      .u32("transfer_workers", &EncoderSettings::transfer_workers, 1, 64)
      .ms("waiting_timeout_ms", &EncoderSettings::waiting_timeout)
      .ms("encode_delay_ms", &EncoderSettings::encode_delay)
      .u64("embedding_cache_bytes", &EncoderSettings::embedding_cache_bytes, 0, uint64_t{1} << 40)
      .part(&EncoderSettings::transfer, kernel::transfer_settings());
  RoleSpec spec = kernel::make_role_spec(
      "encoder", "turns images into embeddings and writes them into prefill's landing slots", true,
      std::move(settings), spawn_encoder);
  spec.runs_model = true;
  return spec;
}

}  // namespace epd::actors
