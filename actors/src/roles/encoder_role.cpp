// The encoder role: SUBMIT (image) -> encode on the compute actor into an engine-registered source slot ->
// EMBED_META to prefill -> EMBED_PULL names the landing address -> one write through the transfer worker ->
// EMBED_DONE. The source slots are one region registered once at start, never per send.
#include <spdlog/spdlog.h>

#include <cstring>
#include <map>
#include <optional>

#include "epd/actors/aux_record.hpp"
#include "epd/actors/membership.hpp"
#include "epd/actors/page_allocator.hpp"
#include "epd/actors/role_support.hpp"
#include "epd/actors/roles/roles.hpp"
#include "epd/actors/transfer_supervisor.hpp"
#include "epd/model/image.hpp"
#include "epd/model/runner.hpp"

namespace epd::actors {
namespace {

using clock = std::chrono::steady_clock;
using protocol::Envelope;
using protocol::ErrorCode;
using protocol::make_error;
using protocol::MessageType;

struct EncoderSettings {
  uint32_t embed_slots = 16;
  uint32_t transfer_workers = 1;
  std::chrono::milliseconds waiting_timeout{10000};
  std::chrono::milliseconds encode_delay{0};  // fault injection: hold each image this long before encoding
  SupervisorConfig transfer;
};

struct EncodeJob {
  uint64_t room = 0;
  std::vector<uint8_t> image;
  float* out = nullptr;  // source slot
  uint64_t capacity_floats = 0;
};

struct EncodeDone {
  uint64_t room = 0;
  bool ok = false;
  protocol::Error error;
  uint32_t tokens = 0;
  uint64_t encode_us = 0;
};

}  // namespace
}  // namespace epd::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::EncodeJob)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::EncodeDone)

namespace epd::actors {
namespace {

struct EncoderRoom {
  std::string router;
  std::string prefill;
  uint64_t router_inc = 0, prefill_inc = 0;  // the incarnations this room is shared with
  uint32_t worker = 0;                       // the transfer worker writing it
  uint32_t slot = 0;
  uint32_t tokens = 0;
  uint64_t bytes = 0;
  uint64_t encode_us = 0;
  bool encoded = false;
  bool writing = false;
  std::chrono::steady_clock::time_point deadline;  // prefill must ask for the embeddings by then
};

struct EncoderState {
  RoleContext ctx;
  EncoderSettings settings;
  uint8_t* slots_base = nullptr;
  uint64_t slot_bytes = 0;
  PageAllocator slots{0};
  std::map<uint64_t, EncoderRoom> rooms;
  std::vector<caf::actor> workers;  // an invalid entry: crashed, not restarted yet
  caf::actor supervisor;
  caf::actor compute;
  bool timeout_armed = false;  // the one timer for the earliest room deadline is pending
  static inline const char* name = "encoder";
};

void publish_load(EncoderState& st) {
  st.ctx.load->free_slots = st.slots.free_count();
  st.ctx.load->total_slots = st.slots.total();
  st.ctx.load->active_rooms = uint32_t(st.rooms.size());
  uint32_t writing = 0;
  for (const auto& [_, r] : st.rooms) writing += r.writing ? 1 : 0;
  st.ctx.load->writes_in_flight = writing;
}

void finish(EncoderState& st, uint64_t id) {
  auto it = st.rooms.find(id);
  if (it == st.rooms.end()) return;
  st.slots.free(std::span<const uint32_t>(&it->second.slot, 1));
  st.rooms.erase(it);
  publish_load(st);
}

// Fails the room: prefill and router are told; the slot is freed unless a write is still reading it.
void fail_room(EncoderState& st, uint64_t id, const protocol::Error& error, bool tell_prefill = true) {
  auto it = st.rooms.find(id);
  if (it == st.rooms.end()) return;
  spdlog::warn("encoder: room {} failed: {}", id, error.to_string());
  if (tell_prefill)
    st.ctx.bridge->send(it->second.prefill, protocol::EmbedDone{id, false, error.code, error.detail, 0});
  report_failure(*st.ctx.bridge, it->second.router, id, error);
  if (!it->second.writing)
    finish(st, id);
  else
    it->second.prefill.clear();  // marks it failed; the write's completion frees it
}

// One timer for every room's deadline, set for the earliest. A delayed message per room stayed in CAF's clock
// for the whole waiting_timeout after its room ended (~270 bytes each).
void arm_timeout(caf::event_based_actor* self, EncoderState& st) {
  if (st.timeout_armed) return;
  std::optional<std::chrono::steady_clock::time_point> due;
  for (const auto& [id, room] : st.rooms)
    if (!room.writing && (!due || room.deadline < *due)) due = room.deadline;
  if (!due) return;
  st.timeout_armed = true;
  const auto wait = std::chrono::ceil<std::chrono::milliseconds>(*due - std::chrono::steady_clock::now());
  self->delayed_send(self, std::max(wait, std::chrono::milliseconds(0)), timeout_atom::value);
}

caf::behavior encode_compute(caf::event_based_actor* self, model::ModelConfig cfg, caf::actor role) {
  harden(self, "encoder-compute");
  auto runner = model::make_reference_runner(cfg);
  if (!runner) {
    spdlog::critical("encoder-compute: cannot build the model: {}", runner.error().to_string());
    self->quit(caf::exit_reason::user_shutdown);
    return {};
  }
  std::shared_ptr<model::ModelRunner> r(std::move(runner.value()));
  return {
      [=](EncodeJob& job) {
        const auto t0 = clock::now();
        EncodeDone done;
        done.room = job.room;
        auto image = model::parse_ppm(job.image);
        if (!image) {
          done.error = image.error();
        } else if (auto emb = r->encode(*image); !emb) {
          done.error = emb.error();
        } else if (emb->data.size() > job.capacity_floats) {
          done.error =
              make_error(ErrorCode::invalid_request, "image gives more embeddings than a slot holds");
        } else {
          std::memcpy(job.out, emb->data.data(), emb->data.size() * sizeof(float));
          done.ok = true;
          done.tokens = emb->tokens;
        }
        done.encode_us = micros_since(t0);
        self->send(role, std::move(done));
      },
  };
}

caf::behavior encoder_role(caf::stateful_actor<EncoderState>* self, RoleContext ctx,
                           EncoderSettings settings) {
  harden(self, "encoder");
  auto& st = self->state;
  st.ctx = std::move(ctx);
  st.settings = settings;
  st.slot_bytes = uint64_t(st.ctx.model.max_image_patches) * st.ctx.model.d_model * sizeof(float);
  st.slots_base = find_local_region(*st.ctx.engine, kEmbedRegion)->base;
  st.slots = PageAllocator(settings.embed_slots);
  SupervisorConfig sc = settings.transfer;
  sc.name = "encoder-transfer";
  sc.workers = settings.transfer_workers;
  auto pool = spawn_transfer_pool(self, st.ctx, sc);
  st.workers = pool.workers;
  st.supervisor = pool.supervisor;
  st.compute =
      st.ctx.system->spawn<caf::detached>(encode_compute, st.ctx.model, caf::actor_cast<caf::actor>(self));
  self->link_to(st.compute);
  publish_load(st);
  return {
      [=](Envelope& env) {
        auto& s = self->state;
        if (auto* sub = std::get_if<protocol::Submit>(&env.body)) {
          auto refuse = [&](protocol::Error e) { report_failure(*s.ctx.bridge, env.sender, sub->room, e); };
          if (sub->room == 0 || s.rooms.count(sub->room))
            return refuse(make_error(ErrorCode::invalid_request, "room id in use"));
          if (sub->image.empty() || sub->prefill.empty())
            return refuse(
                make_error(ErrorCode::invalid_request, "SUBMIT to an encoder needs an image and a prefill"));
          auto prefill = s.ctx.bridge->peers().find(sub->prefill);
          if (!prefill || !s.ctx.bridge->peers().alive(sub->prefill))
            return refuse(
                make_error(ErrorCode::peer_died, "prefill '" + sub->prefill + "' is not alive here"));
          auto slot = s.slots.allocate(1);
          if (!slot)
            return refuse(make_error(ErrorCode::out_of_capacity, "no free embedding slot on the encoder"));
          EncoderRoom room;
          room.router = env.sender;
          room.prefill = sub->prefill;
          room.router_inc = env.incarnation;
          room.prefill_inc = prefill->incarnation;
          room.slot = (*slot)[0];
          room.deadline = std::chrono::steady_clock::now() + s.settings.waiting_timeout;
          s.rooms.emplace(sub->room, room);
          publish_load(s);
          EncodeJob job{sub->room, std::move(sub->image),
                        reinterpret_cast<float*>(s.slots_base + uint64_t(room.slot) * s.slot_bytes),
                        s.slot_bytes / sizeof(float)};
          if (s.settings.encode_delay.count() > 0)
            self->delayed_send(s.compute, s.settings.encode_delay, std::move(job));
          else
            self->send(s.compute, std::move(job));
          arm_timeout(self, s);
        } else if (auto* pull = std::get_if<protocol::EmbedPull>(&env.body)) {
          auto it = s.rooms.find(pull->room);
          // Prefill gave the room up and asks whether we could still write its landing slot: a room we do
          // not hold, or hold for another prefill incarnation (our jobs carry it), has no write for it.
          if (pull->code != ErrorCode::ok && (it == s.rooms.end() || it->second.prefill != env.sender ||
                                              env.incarnation != it->second.prefill_inc)) {
            s.ctx.bridge->answer(env, protocol::EmbedDone{pull->room, false, ErrorCode::aborted,
                                                          "no write of this room is in flight here", 0});
            return;
          }
          if (it == s.rooms.end() || it->second.prefill != env.sender ||
              env.incarnation != it->second.prefill_inc || !it->second.encoded || it->second.writing) {
            spdlog::warn("encoder: unexpected EMBED_PULL for room {} from '{}'", pull->room, env.sender);
            return;
          }
          // Prefill cannot take them (or gave the room up): fail it; EMBED_DONE tells prefill that no write
          // of the room will come from here.
          if (pull->code != ErrorCode::ok)
            return fail_room(s, pull->room,
                             make_error(pull->code, "prefill '" + env.sender + "': " + pull->reason));
          if (pull->bytes != it->second.bytes)
            return fail_room(s, pull->room,
                             make_error(ErrorCode::invalid_request, "EMBED_PULL size mismatch"));
          auto& r = it->second;
          r.worker = uint32_t(pull->room % s.workers.size());
          for (size_t i = 0; i < s.workers.size() && !s.workers[r.worker]; ++i)
            r.worker = uint32_t((r.worker + 1) % s.workers.size());
          if (!s.workers[r.worker])
            return fail_room(
                s, pull->room,
                make_error(ErrorCode::worker_crashed, "no transfer worker is alive (restart budget spent)"));
          r.writing = true;
          publish_load(s);
          const uint64_t src = reinterpret_cast<uint64_t>(s.slots_base) + uint64_t(r.slot) * s.slot_bytes;
          TransferJob job{pull->room,
                          0,
                          env.sender,
                          r.prefill_inc,
                          {{src, pull->addr, pull->bytes, pull->fence}},
                          caf::actor_cast<caf::actor>(self)};
          self->send(s.workers[r.worker], std::move(job));
        } else if (auto* cancel = std::get_if<protocol::Cancel>(&env.body)) {
          auto it = s.rooms.find(cancel->room);
          if (it != s.rooms.end() && !it->second.writing) finish(s, cancel->room);
        } else {
          handle_unhandled(*s.ctx.bridge, "encoder", env);
        }
      },
      [=](EncodeDone& d) {
        auto& s = self->state;
        auto it = s.rooms.find(d.room);
        if (it == s.rooms.end()) return;
        if (!d.ok) {
          // A bad image is the request's fault: tell the router (not retryable) and prefill.
          return fail_room(s, d.room, d.error);
        }
        it->second.encoded = true;
        it->second.tokens = d.tokens;
        it->second.bytes = uint64_t(d.tokens) * s.ctx.model.d_model * sizeof(float);
        it->second.encode_us = d.encode_us;
        s.ctx.bridge->send(it->second.prefill, protocol::EmbedMeta{d.room, d.tokens, s.ctx.model.d_model,
                                                                   it->second.bytes, protocol::DType::f32});
      },
      [=](TransferDone& d) {
        auto& s = self->state;
        auto it = s.rooms.find(d.room);
        if (it == s.rooms.end()) return;
        it->second.writing = false;
        publish_load(s);
        if (it->second.prefill.empty()) return finish(s, d.room);  // failed meanwhile
        if (!d.ok) {
          protocol::Error e = d.error;
          e.detail = "embedding write to '" + it->second.prefill + "' failed: " + e.detail;
          return fail_room(s, d.room, e);
        }
        s.ctx.bridge->send(it->second.prefill,
                           protocol::EmbedDone{d.room, true, ErrorCode::ok, "", it->second.encode_us});
        finish(s, d.room);
      },
      [=](timeout_atom) {
        auto& s = self->state;
        s.timeout_armed = false;
        std::vector<uint64_t> late;
        for (const auto& [id, room] : s.rooms)
          if (!room.writing && room.deadline <= std::chrono::steady_clock::now()) late.push_back(id);
        for (uint64_t id : late) {
          auto it = s.rooms.find(id);
          if (it == s.rooms.end()) continue;
          fail_room(s, id,
                    make_error(ErrorCode::waiting_timeout, "prefill '" + it->second.prefill +
                                                               "' did not ask for room " +
                                                               std::to_string(id) + "'s embeddings in time"));
        }
        arm_timeout(self, s);
      },
      [=](PeerChanges& pc) {
        auto& s = self->state;
        for (const auto& c : pc.changes) {
          if (c.old_incarnation == 0) continue;
          for (auto& w : s.workers)
            if (w) self->send(w, forget_atom::value, c.id);
          auto shared = [&](const std::string& peer, uint64_t inc) {
            return peer == c.id && (inc == 0 || inc == c.old_incarnation);
          };
          std::vector<uint64_t> affected;
          for (auto& [id, r] : s.rooms)
            if (shared(r.prefill, r.prefill_inc) || shared(r.router, r.router_inc)) affected.push_back(id);
          for (uint64_t id : affected)
            fail_room(s, id,
                      make_error(ErrorCode::peer_died, "peer '" + c.id + "' (incarnation " +
                                                           std::to_string(c.old_incarnation) + ") " +
                                                           (c.new_incarnation ? "restarted" : "is gone")),
                      false);
        }
      },
      [=](WorkerCrashed& wc) {
        auto& s = self->state;
        s.workers[wc.index] = wc.replacement;
        // The rooms whose embedding write died with it. Its sessions were closed before it went: nothing
        // still reads their source slots. Prefill and router are told at once; the slots are freed.
        std::vector<uint64_t> held;
        for (auto& [id, r] : s.rooms)
          if (r.worker == wc.index && r.writing) held.push_back(id);
        spdlog::warn("encoder: transfer worker {} crashed holding {} room(s): {}", wc.index, held.size(),
                     wc.cause);
        for (uint64_t id : held) {
          auto& r = s.rooms.at(id);
          r.writing = false;
          publish_load(s);
          if (r.prefill.empty())
            finish(s, id);  // had failed already, waiting for the write to end
          else
            fail_room(s, id, make_error(ErrorCode::worker_crashed, "transfer worker crashed: " + wc.cause));
        }
      },
      [=](WorkerRestored& wr) { self->state.workers[wr.index] = wr.worker; },
  };
}

protocol::Result<RoleHandle> spawn_encoder(RoleContext& ctx) {
  EncoderSettings s;
  const auto& cfg = ctx.instance->settings;
  SettingsReader read(cfg);
  read.u32("embed_slots", s.embed_slots, 1, 1u << 16)
      .u32("transfer_workers", s.transfer_workers, 1, 64)
      .ms("waiting_timeout_ms", s.waiting_timeout)
      .ms("encode_delay_ms", s.encode_delay);
  if (auto st = read.status(); !st) return st.error();
  if (auto st = read_transfer_settings(cfg, s.transfer); !st) return st.error();
  const uint64_t slot_bytes = uint64_t(ctx.model.max_image_patches) * ctx.model.d_model * sizeof(float);
  if (auto r = ctx.engine->allocate(kEmbedRegion, slot_bytes * s.embed_slots); !r) return r.error();
  RoleHandle h;
  h.main = ctx.system->spawn(encoder_role, ctx, s);
  for (auto t : {MessageType::submit, MessageType::embed_pull, MessageType::cancel})
    ctx.bridge->subscribe(t, h.main);
  return h;
}

}  // namespace

RoleSpec encoder_role_spec() {
  RoleSpec spec;
  spec.name = "encoder";
  spec.summary = "turns images into embeddings and writes them into prefill's landing slots";
  spec.needs_engine = true;
  spec.settings = {"embed_slots", "transfer_workers", "waiting_timeout_ms", "encode_delay_ms"};
  spec.settings.insert(spec.settings.end(), std::begin(kTransferSettingKeys), std::end(kTransferSettingKeys));
  spec.spawn = spawn_encoder;
  return spec;
}

}  // namespace epd::actors
