// The decode role: pre-allocates KV pages for a room (BOOTSTRAP to prefill), checks the aux record when
// prefill reports Success, hands the room to the decode loop, and reports RESULT to the router. Every page
// and aux slot is freed on every terminal state. Pages a prefill may still be writing are reused only once it
// certainly cannot write them any more (docs/failure-handling.md, "Stale writers"): it acknowledged the
// ABORT, a new incarnation of it spoke, its process is gone, or - for a writer that can only reach us
// through backends that enforce write fences (tcp's receiver, rdma's per-grant registrations) - the abort
// timeout passed and its grant is revoked.
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <cstring>
#include <map>
#include <optional>

#include "cache/page_allocator.hpp"
#include "cache/staging_ring.hpp"
#include "epd/actors/aux_record.hpp"
#include "epd/actors/cache/prefix_cache.hpp"
#include "epd/actors/kernel/role_kernel.hpp"
#include "epd/actors/kernel/role_settings.hpp"
#include "epd/actors/process_metrics.hpp"
#include "epd/actors/room.hpp"
#include "epd/model/chunk_grid.hpp"
#include "epd/model/kv_cache.hpp"
#include "epd/model/kv_staging.hpp"
#include "epd/model/mmproj.hpp"
#include "roles/decode_loop.hpp"
#include "roles/logprobs_wire.hpp"
#include "roles/roles.hpp"

namespace epd::actors {
namespace {

using clock = std::chrono::steady_clock;
using protocol::Envelope;
using protocol::ErrorCode;
using protocol::make_error;
using protocol::MessageType;
using abort_done_atom = caf::atom_constant<caf::atom("abortdone")>;
using scatter_atom = caf::atom_constant<caf::atom("scatter")>;

struct DecodeSettings {
  uint32_t kv_pages = 1024;
  uint32_t aux_slots = 256;
  uint32_t max_batch = 16;
  std::chrono::milliseconds waiting_timeout{30000};
  std::chrono::milliseconds abort_timeout{2000};
  uint64_t staging_ring_bytes = 8u << 20;  // 0: no ring, a prefill with another KV layout cannot serve here
  std::chrono::milliseconds staging_scatter_delay{0};  // fault injection: hold each chunk before its scatter
  std::chrono::milliseconds step_delay{0};  // fault injection: a pause between decode steps (slow answers)
  uint32_t prefix_cache_pages = kPrefixCacheDefault;  // KV pages of finished prompts kept; 0: off
  protocol::KvLayout layout;
};

struct DecodeRoom {
  RoomState state;
  std::string request_id;  // the client's, for the logs
  model::SamplingParams sampling;
  bool cancelled = false;  // the router's CANCEL asked the loop to drop it (counted when it did)
  std::string router;
  std::string prefill;
  uint64_t router_inc = 0, prefill_inc = 0;  // the incarnations this room is shared with
  // KV pages in token order: first the prefix cache's (`prefix`: read-only, never under the fence, prefill
  // writes none of them), then the room's own. Once the prompt's KV is in, the cache may take over the own
  // whole prompt pages (the lease grows).
  std::vector<uint32_t> pages;
  PrefixCache::Lease prefix;
  std::vector<PageKey> page_keys;     // the prompt's whole pages, as the cache keys them
  std::vector<uint32_t> prompt;       // with the answer, the keys of the pages it leaves behind; penalties
  std::optional<ContentHash> images;  // SUBMIT's images_key: the keys of image rows
  uint32_t held_tokens = 0;           // prompt tokens the room found cached (BOOTSTRAP's held_tokens)
  uint32_t aux_slot = 0;
  uint64_t fence = 0;                                 // our write grant for its prompt pages and aux slot
  std::optional<protocol::SegmentDescriptor> writer;  // the prefill's segment, when it was listed
  bool holding_logged = false;                        // "still holding" said once per quarantined room
  uint32_t prompt_len = 0;
  uint32_t first_index = 0;         // SUBMIT's resume_from
  uint32_t position_lag = 0;        // M-RoPE: the answer rotates this far behind its slots
  protocol::GrammarSpec grammar{};  // SUBMIT's
  bool ignore_eos = false;          // SUBMIT's
  uint32_t max_new = 0;
  protocol::KvStatus kv;  // timings prefill reported
  // Until prefill starts the room, the request's budget after SUBMIT and waiting_timeout more (it may be
  // queued there behind other prompts: nothing is wrong); from then on, waiting_timeout after each chunk
  // prefill reports.
  clock::time_point kv_deadline;
  bool kv_started = false;  // prefill said it started computing the room
  clock::time_point kv_ready;
  // Staged path (the prefill's KV layout differs): chunks land in the ring and are scattered here.
  bool staged = false;
  protocol::KvLayout src_layout;                   // the prefill's
  std::map<uint32_t, protocol::ChunkReady> ready;  // announced, scatter pending (delay)
  uint32_t scattered = 0;                          // prompt tokens scattered
  bool success_pending = false;                    // KV_STATUS Success in, scatters still pending
  uint32_t first_token = 0;

  // The peers whose loss fails the room: its router, and its prefill until the KV is complete.
  std::vector<kernel::SharedPeer> shared_peers() const {
    if (state.state() == KvState::success) return {{router, router_inc}};
    return {{prefill, prefill_inc}, {router, router_inc}};
  }
};

struct DecodeState : kernel::RoleBase {
  DecodeSettings settings;
  protocol::KvLayout layout;
  uint8_t* aux_base = nullptr;
  PageAllocator pages{0};
  PageAllocator aux{0};
  // Whole prompt pages of earlier rooms: a room whose prompt starts with them asks prefill for the rest only.
  std::unique_ptr<PrefixCache> prefix;
  uint64_t kv_base = 0;
  kernel::RoomTable<DecodeRoom> rooms{0};  // a late message for an ended room is refused, no tombstone needed
  std::map<uint64_t, DecodeRoom> quarantine;  // aborted rooms whose pages a prefill may still write
  model::KvPool pool;
  StagingRing ring{1};
  uint8_t* ring_base = nullptr;
  // Prefills (id -> incarnation) that asked for ring space: they get every WATERMARK.
  std::map<std::string, uint64_t> writers;
  caf::actor loop;
  static inline const char* name = "decode";
};

void publish_load(DecodeState& st) {
  uint32_t held = 0;
  for (const auto& [_, room] : st.quarantine) held += uint32_t(room.pages.size());
  st.ctx.load->quarantined_pages = held;
  // Cached pages no room references are free for placement: a room that needs them evicts them.
  st.ctx.load->free_kv_pages = st.pages.free_count() + st.prefix->evictable();
  publish_prefix_cache(*st.ctx.load, *st.prefix);
  st.ctx.load->total_kv_pages = st.pages.total();
  st.ctx.load->active_rooms = uint32_t(st.rooms.size());
  std::array<uint32_t, 2> phases{};  // waiting for KV, decoding
  for (const auto& [_, room] : st.rooms) ++phases[room.state.state() == KvState::success ? 1 : 0];
  st.ctx.load->room_phases.publish(phases);
}

StagingGauge& gauge(DecodeState& st) {
  return st.ctx.load->staging;
}

// After the ring changed: publish its figures and, when the watermark moved, tell every writer.
void ring_changed(DecodeState& st, bool watermark_moved) {
  auto& g = gauge(st);
  g.note_ring_use(st.ring.used());
  g.rounds = st.ring.rounds();
  if (!watermark_moved) return;
  const auto w = st.ring.watermark_message();
  for (auto it = st.writers.begin(); it != st.writers.end();) {
    if (st.ctx.bridge->send(it->first, w)) {
      ++g.watermarks;
      ++it;
    } else {
      it = st.writers.erase(it);  // gone from the directory
    }
  }
}

// Revokes the room's write grant: from now on a write under it is refused (tcp: by our receiver; rdma: by
// our device, the grant's registrations are gone). False while one is still being received over tcp; the
// pages must not be reused yet.
bool revoke_fence(DecodeState& st, DecodeRoom& room) {
  if (room.fence == 0) return true;
  if (!st.ctx.engine->revoke_writes(room.fence)) return false;
  room.fence = 0;
  return true;
}

void release(DecodeState& st, uint64_t id, DecodeRoom& room) {
  if (!revoke_fence(st, room))
    spdlog::error("decode: room {} released while a write under its grant is landing", id);
  std::span<const uint32_t> own(room.pages);
  if (!st.pages.free(own.subspan(std::min(room.prefix.size(), own.size()))))
    spdlog::error("decode: page accounting broken while freeing a room (double free refused)");
  st.prefix->release(room.prefix);
  st.aux.free(std::span<const uint32_t>(&room.aux_slot, 1));
  room.pages.clear();
  if (room.staged) ring_changed(st, st.ring.release_room(id));
}

// Holds an aborted room's pages until its prefill certainly writes none of them (see end_quarantine).
void quarantine(DecodeState& st, uint64_t id, DecodeRoom&& room) {
  st.quarantine.emplace(id, std::move(room));
  st.self->delayed_send(st.self, st.settings.abort_timeout, abort_done_atom::value, id);
}

struct Notify {
  bool router = true;  // RESULT failed (false: the router cancelled the room itself)
};

// Fails a room: tells the router, aborts it on the prefill side if prefill may still write, frees the rest.
void fail_room(DecodeState& st, uint64_t id, protocol::Error error, Notify notify = {}) {
  DecodeRoom* room = st.rooms.find(id);
  if (!room) return;
  const bool prefill_may_write = room->state.state() == KvState::waiting_for_input;
  if (!room->state.fail(error)) return;
  kernel::announce_failure(st.bridge(), "decode", id, room->request_id, room->router, error, notify.router);
  if (prefill_may_write) {
    st.bridge().send(room->prefill, protocol::Abort{id, error.code, error.detail});
    quarantine(st, id, st.rooms.take(id));
  } else {
    release(st, id, *room);
    st.rooms.end(id);
  }
  publish_load(st);
}

// Frees a quarantined room's pages and aux slot, once its grant is revoked with no write of it landing.
void end_quarantine(DecodeState& st, uint64_t id) {
  auto it = st.quarantine.find(id);
  if (it == st.quarantine.end() || !revoke_fence(st, it->second)) return;
  release(st, id, it->second);
  st.quarantine.erase(it);
  publish_load(st);
}

// The abort timeout of a quarantined room passed without an ABORT_ACK. Its pages are reused only if the
// prefill certainly cannot write them: it can reach us only through backends that refuse revoked grants
// (tcp, rdma), or its process is gone. A writer that maps our memory (shm) and may just be frozen keeps
// them held until it answers, restarts or dies; we look again every timeout.
void on_abort_timeout(DecodeState& st, uint64_t id) {
  auto it = st.quarantine.find(id);
  if (it == st.quarantine.end()) return;
  DecodeRoom& room = it->second;
  const auto& engine = *st.ctx.engine;
  const bool fenced = room.writer && engine.fences_writes_from(*room.writer);
  if (fenced || (room.writer && engine.writer_gone(*room.writer))) {
    if (revoke_fence(st, room)) return end_quarantine(st, id);
  } else {
    // The first ABORT may have been lost with a broken connection (a frozen prefill, or our own rejoin):
    // ask again; a prefill that has ended the room answers at once.
    if (st.ctx.bridge->peers().alive(room.prefill))
      st.ctx.bridge->send(room.prefill, protocol::Abort{id, ErrorCode::aborted, "room was aborted here"});
  }
  if (!fenced && !room.holding_logged) {
    room.holding_logged = true;
    spdlog::warn(
        "decode: holding {} page(s) of aborted {}: prefill '{}' (incarnation {}) has not "
        "acknowledged and could still write them over shm; they are reused once it answers, "
        "restarts or its process is gone",
        room.pages.size(), kernel::room_tag(id, room.request_id), room.prefill, room.prefill_inc);
  }
  st.self->delayed_send(st.self, st.settings.abort_timeout, abort_done_atom::value, id);
}

// The prefill finished with an aborted room: none of its writes is in flight any more.
void on_abort_ack(DecodeState& st, const Envelope& env, protocol::AbortAck& ack) {
  auto it = st.quarantine.find(ack.room);
  if (it == st.quarantine.end() || it->second.prefill != env.sender) return;
  end_quarantine(st, ack.room);
}

// The one timer is set no further than waiting_timeout ahead: every deadline is at least that far from when
// it is set (a chunk report moves a room's to waiting_timeout from then), so none comes before a pending
// timer.
void arm_timeout(DecodeState& st) {
  auto due = kernel::earliest(st.rooms, [](const DecodeRoom& r) {
    return r.state.state() == KvState::waiting_for_input ? std::optional(r.kv_deadline) : std::nullopt;
  });
  if (due) due = std::min(*due, kernel::DeadlineTimer::now(st.self) + st.settings.waiting_timeout);
  st.deadline.arm(st.self, due);
}

// The prompt the client wrote: the room's prompt without a resumed answer's tokens, which end it.
uint32_t client_prompt(const DecodeRoom& room) {
  return room.prompt_len - std::min(room.prompt_len, room.first_index);
}

void on_submit(DecodeState& st, const Envelope& env, protocol::Submit& s) {
  const auto& m = st.ctx.model;
  auto refuse = [&](protocol::Error e) {
    spdlog::warn("decode: refused {}: {}", kernel::room_tag(s.room, s.request_id), e.to_string());
    report_failure(*st.ctx.bridge, env.sender, s.room, e);
  };
  if (s.room == 0 || st.rooms.contains(s.room) || st.quarantine.count(s.room))
    return refuse(make_error(ErrorCode::invalid_request, "room id " + std::to_string(s.room) + " is in use"));
  if (s.prompt.empty() || s.prompt.size() >= m.max_seq || s.max_tokens == 0 || s.prefill.empty())
    return refuse(
        make_error(ErrorCode::invalid_request, "SUBMIT needs 1.." + std::to_string(m.max_seq - 1) +
                                                   " prompt tokens, max_tokens >= 1 and a prefill instance"));
  if (auto ok = model::validate(sampling_of(s)); !ok) return refuse(ok.error());
  auto positions = positions_of(m, s);  // where the answer's tokens rotate: past every image
  if (!positions) return refuse(positions.error());
  // A prefill that is dead to us (its connection broke) may still be listed by the registry for a moment:
  // refuse at once so the router retries elsewhere, instead of waiting for a KV that never comes.
  auto prefill = st.ctx.bridge->peers().find(s.prefill);
  if (prefill && !st.ctx.bridge->peers().alive(s.prefill))
    return refuse(make_error(ErrorCode::peer_died,
                             "prefill '" + s.prefill + "' is dead to decode '" + st.ctx.instance->id + "'"));
  DecodeRoom room;
  if (prefill && prefill->kv_layout && !prefill->kv_layout->same_page_format(st.layout)) {
    const auto& theirs = *prefill->kv_layout;
    if (theirs.layers != st.layout.layers || theirs.kv_heads != st.layout.kv_heads ||
        theirs.head_dim != st.layout.head_dim || st.ring.size() <= 1)
      return refuse(make_error(ErrorCode::invalid_request,
                               "prefill '" + s.prefill + "' holds KV as " + describe_layout(theirs) +
                                   ", decode '" + st.ctx.instance->id + "' as " + describe_layout(st.layout) +
                                   (st.ring.size() <= 1 ? ", and this decode has no staging ring"
                                                        : ", and the model shapes differ")));
    room.staged = true;
    room.src_layout = theirs;
    st.ctx.load->staging.active = true;
  }
  room.request_id = s.request_id.substr(0, kernel::kMaxLoggedRequestId);
  room.sampling = sampling_of(s);
  room.router = env.sender;
  room.router_inc = env.incarnation;
  room.prefill = s.prefill;
  room.prefill_inc = prefill ? prefill->incarnation : 0;
  if (prefill) room.writer = prefill->segment;
  room.prompt_len = uint32_t(s.prompt.size());
  room.first_index = s.resume_from;
  room.position_lag = positions->lag();
  room.max_new = std::min<uint32_t>(s.max_tokens, m.max_seq - room.prompt_len);
  const uint32_t need = model::pages_for(st.layout, uint64_t(room.prompt_len) + room.max_new);
  // More than the whole pool: no wait or retry would ever place it (the router would retry it until its
  // deadline), so it is the request's fault.
  if (need > st.pages.total())
    return refuse(
        make_error(ErrorCode::invalid_request, "the prompt and max_tokens need " + std::to_string(need) +
                                                   " KV pages of " + std::to_string(st.layout.page_size) +
                                                   " tokens, decode '" + st.ctx.instance->id + "' holds " +
                                                   std::to_string(st.pages.total()) + " in all"));
  // The prompt's leading pages held already: prefill writes none of them. The router names the images
  // (SUBMIT's images_key), so pages with image rows are keyed too.
  const auto image_token = model::image_token(m);
  room.images = content_hash_from(s.images_key);
  room.page_keys = page_keys(s.prompt, st.layout.page_size, image_token, room.images, /*tail=*/true);
  room.grammar = s.grammar;
  room.ignore_eos = s.ignore_eos;
  if (st.prefix->enabled() || room.sampling.penalized() || !room.grammar.empty()) room.prompt = s.prompt;
  // The cache holds only K/V other prompts compute alike; where the model's bits depend on the chunking,
  // a resumed answer's tokens are not among them (prefill replays them as decode steps).
  const uint32_t holdable = model::chunking_exact(st.ctx.model) ? room.prompt_len : client_prompt(room);
  room.prefix = st.prefix->acquire(room.page_keys, holdable / st.layout.page_size, room.prompt_len);
  room.held_tokens = uint32_t(room.prefix.size()) * st.layout.page_size;
  // Past the whole pages, a cached page that starts like the rest of the prompt (the last turn's partial
  // page, typically) gives its first tokens too: copied into the room's first own page, which prefill then
  // writes from that token on. Only where prefill can write a page from a token on: token-major pages, or
  // the staged path (token by token).
  std::vector<std::byte> carried;
  if (room.prefix.size() < room.page_keys.size() &&
      (room.staged || st.layout.order == protocol::KvDimOrder::token_head_dim)) {
    auto hit = st.prefix->partial_hit(room.prefix, room.page_keys[room.prefix.size()], image_token);
    if (hit) hit->tokens = std::min(hit->tokens, holdable - room.held_tokens);
    if (hit && hit->tokens > 0 && hit->tokens < st.layout.page_size) {
      carried.resize(size_t(hit->tokens) * model::staging_token_bytes(st.layout));
      if (model::gather_tokens(st.pool, std::span(&hit->page, 1), 0, hit->tokens, carried.data())) {
        room.held_tokens += hit->tokens;
        st.prefix->count_partial(hit->tokens);
      } else {
        carried.clear();
      }
    }
  }
  const uint32_t own = need - uint32_t(room.prefix.size());
  if (own > st.pages.free_count()) st.pages.free(st.prefix->evict(own - st.pages.free_count()));
  auto pages = st.pages.allocate(own);
  auto slot = st.aux.allocate(1);
  if (!pages || !slot) {
    if (pages) st.pages.free(*pages);
    if (slot) st.aux.free(*slot);
    st.prefix->release(room.prefix);
    // Name the resource that ran out: pages, or the aux slots (one per room, `aux_slots`).
    return refuse(make_error(ErrorCode::out_of_capacity,
                             !pages ? "decode '" + st.ctx.instance->id + "' has " +
                                          std::to_string(st.pages.free_count()) + " free KV pages, room " +
                                          std::to_string(s.room) + " needs " + std::to_string(need)
                                    : "decode '" + st.ctx.instance->id + "' has no free aux slot (all " +
                                          std::to_string(st.settings.aux_slots) + " hold rooms; aux_slots)"));
  }
  room.pages = room.prefix.pages();
  room.pages.insert(room.pages.end(), pages->begin(), pages->end());
  if (!carried.empty()) {
    const uint32_t n = room.held_tokens % st.layout.page_size;
    if (!model::scatter_tokens(st.pool, std::span(&pages->front(), 1), 0, n, carried.data(), st.layout))
      room.held_tokens -= n;  // cannot happen (the same layout both ways); prefill then writes them
  }
  room.scattered = room.held_tokens;  // a staged prefill sends only the tokens after them
  room.aux_slot = (*slot)[0];
  std::memset(st.aux_base + uint64_t(room.aux_slot) * sizeof(AuxRecord), 0, sizeof(AuxRecord));

  protocol::Bootstrap b;
  b.room = s.room;
  const uint32_t prompt_pages = model::pages_for(st.layout, room.prompt_len);
  b.dst_pages.assign(room.pages.begin(), room.pages.begin() + prompt_pages);
  b.aux_slot = room.aux_slot;
  b.prompt_len = room.prompt_len;
  b.held_tokens = room.held_tokens;
  // The grant every KV and aux write of this room presents; revoked before these pages are reused. Cached
  // pages are not in it: nobody may write them.
  std::vector<uint64_t> units;
  for (uint32_t layer = 0; layer < st.layout.layers; ++layer)
    for (uint32_t kind = 0; kind < 2; ++kind)
      for (size_t i = room.prefix.size(); i < b.dst_pages.size(); ++i)
        units.push_back((uint64_t{layer} * 2 + kind) * st.layout.num_pages + b.dst_pages[i]);
  room.fence = st.ctx.engine->grant_writes(st.kv_base, units);
  const uint64_t aux_unit = room.aux_slot;
  room.fence =
      st.ctx.engine->grant_writes(reinterpret_cast<uint64_t>(st.aux_base), {&aux_unit, 1}, room.fence);
  b.fence = room.fence;
  room.state.advance(KvState::waiting_for_input);
  // Before prefill starts the room, the router's budget bounds it (its timeout cancels the room here); this
  // deadline, waiting_timeout past it, is only for a cancel that never comes.
  room.kv_deadline = kernel::DeadlineTimer::now(st.self) + std::chrono::milliseconds(s.budget_ms) +
                     st.settings.waiting_timeout;
  const uint64_t id = s.room;
  spdlog::debug("decode: {} accepted: {} prompt ({} held) + {} new tokens in {} pages, prefill '{}'",
                kernel::room_tag(id, room.request_id), room.prompt_len, room.held_tokens, room.max_new,
                room.pages.size(), room.prefill);
  st.rooms.insert(id, std::move(room));
  publish_load(st);
  if (!st.ctx.bridge->send(s.prefill, std::move(b))) {
    fail_room(st, id,
              make_error(ErrorCode::peer_unreachable, "prefill '" + s.prefill + "' is not known here (yet)"));
    return;
  }
  arm_timeout(st);
}

// Of the room's sequence (prompt, then answer), the leading tokens whose K/V other prompts compute alike:
// all of them for an exact model; else what prefill said of the prompt (KV_STATUS), never past the prompt
// the client wrote (a resumed answer's tokens and the answer are a decode step's, which a prompt computes
// with other kernels), whatever prefill said.
uint32_t shareable(const DecodeState& st, const DecodeRoom& room, size_t sequence_tokens) {
  if (model::chunking_exact(st.ctx.model)) return uint32_t(sequence_tokens);
  return uint32_t(std::min<size_t>({sequence_tokens, room.kv.shareable_tokens, client_prompt(room)}));
}

void start_decoding(DecodeState& st, uint64_t id, DecodeRoom& room) {
  room.state.advance(KvState::success);
  room.kv_ready = clock::now();
  // The prompt's KV is complete and prefill writes no more: revoke its grant, and the cache may keep the
  // whole prompt pages (the loop writes only from position prompt_len, in pages of the room's own).
  if (revoke_fence(st, room)) {
    std::vector<uint32_t> evicted;
    // The partial last page is still written; only what other prompts compute alike is kept.
    const size_t whole = shareable(st, room, room.prompt_len) / st.layout.page_size;
    st.prefix->adopt(room.prefix, std::span(room.page_keys).first(std::min(whole, room.page_keys.size())),
                     room.pages, evicted);
    st.pages.free(evicted);
  }
  // The penalties count the prompt's tokens (a resumed answer's first ones end it).
  // A grammar's state is rebuilt from a resumed answer's tokens, which end the prompt.
  std::vector<uint32_t> prompt =
      room.sampling.penalized() || !room.grammar.empty() ? room.prompt : std::vector<uint32_t>{};
  DecodeJoin join{id,           room.pages,  room.prompt_len, room.first_token, room.first_index,
                  room.max_new, room.router, room.sampling,   std::move(prompt)};
  join.grammar = room.grammar;
  join.ignore_eos = room.ignore_eos;
  join.position_lag = room.position_lag;
  if (room.sampling.logprobs) join.first_logprobs = std::move(from_wire(*room.kv.first_logprobs).front());
  st.self->send(st.loop, std::move(join));
}

// Logs and answers a staging message that matches no room or chunk here.
void reject(DecodeState& st, const Envelope& env, const std::string& why) {
  ++gauge(st).rejected;
  spdlog::warn("decode: rejected {} from '{}': {}", protocol::type_name(env.type()), env.sender, why);
  st.ctx.bridge->answer(env, protocol::ErrorReply{ErrorCode::unknown_room, why, uint16_t(env.type()), 0});
}

// The staged room `room` names, when `env` comes from the prefill incarnation it is shared with.
DecodeRoom* staged_room(DecodeState& st, const Envelope& env, uint64_t id) {
  DecodeRoom* room = st.rooms.find(id);
  if (!room || !room->staged || room->prefill != env.sender ||
      (room->prefill_inc != 0 && room->prefill_inc != env.incarnation))
    return nullptr;
  return room;
}

void on_staging_req(DecodeState& st, const Envelope& env, protocol::StagingReq& req) {
  DecodeRoom* room = staged_room(st, env, req.room);
  if (!room || room->state.state() != KvState::waiting_for_input)
    return reject(
        st, env,
        "room " + std::to_string(req.room) + " has no staged transfer waiting for '" + env.sender + "'");
  protocol::StagingRsp rsp;
  rsp.room = req.room;
  rsp.chunk = req.chunk;
  const uint64_t token_bytes = model::staging_token_bytes(room->src_layout);
  auto grant = st.ring.reserve(req.room, req.chunk, req.bytes);
  if (!grant) {
    rsp.status = grant.error().code == ErrorCode::oversized ? protocol::StagingStatus::oversized
                                                            : protocol::StagingStatus::rejected;
    rsp.reason = grant.error().detail;
    if (rsp.status == protocol::StagingStatus::oversized) ++gauge(st).oversized;
  } else if (req.bytes % token_bytes != 0 || req.bytes / token_bytes > room->prompt_len) {
    st.ring.release_room(req.room);  // nothing of this room will be written
    rsp.status = protocol::StagingStatus::rejected;
    rsp.reason = std::to_string(req.bytes) + " bytes is not a whole number of the room's tokens (" +
                 std::to_string(token_bytes) + " bytes each, at most " + std::to_string(room->prompt_len) +
                 ")";
  } else {
    rsp.offset = grant->offset;
    rsp.round = grant->round;
    // A new writer (or a new incarnation of one) starts from a watermark of 0: tell it where the ring
    // is first (same connection, so it arrives before the grant), or it could wait for a watermark that
    // only moves when somebody else's chunk is consumed.
    if (auto [w, fresh] = st.writers.try_emplace(env.sender, env.incarnation);
        fresh || w->second != env.incarnation) {
      w->second = env.incarnation;
      st.ctx.bridge->send(env.sender, st.ring.watermark_message());
      ++gauge(st).watermarks;
    }
  }
  if (rsp.status != protocol::StagingStatus::ok)
    spdlog::warn("decode: refused staging space for chunk {} of room {}: {}", req.chunk, req.room,
                 rsp.reason);
  ring_changed(st, false);
  st.ctx.bridge->send(env.sender, std::move(rsp));
}

// Scatters one announced chunk from the ring into the room's pages, frees its ring space.
void scatter(DecodeState& st, uint64_t id, uint32_t chunk) {
  DecodeRoom* found = st.rooms.find(id);
  if (!found) return;  // the room ended; release() gave its ring space back
  DecodeRoom& room = *found;
  auto rd = room.ready.find(chunk);
  if (rd == room.ready.end()) return;
  const protocol::ChunkReady c = rd->second;
  room.ready.erase(rd);
  const std::byte* src = reinterpret_cast<const std::byte*>(st.ring_base + c.offset);
  if (XXH3_64bits(src, c.bytes) != c.checksum)
    return fail_room(st, id,
                     make_error(ErrorCode::corrupt_kv, "staged chunk " + std::to_string(chunk) + " of room " +
                                                           std::to_string(id) +
                                                           " does not match its checksum in the ring"));
  if (auto ok = model::scatter_tokens(st.pool, room.pages, c.first_token, c.tokens, src, room.src_layout);
      !ok)
    return fail_room(st, id, ok.error());
  room.scattered += c.tokens;
  ++gauge(st).chunks;
  ring_changed(st, st.ring.consume(id, chunk));
  if (room.success_pending && room.ready.empty()) {
    if (room.scattered != room.prompt_len)
      return fail_room(st, id,
                       make_error(ErrorCode::corrupt_kv,
                                  "staged KV incomplete: " + std::to_string(room.scattered) + " of " +
                                      std::to_string(room.prompt_len) + " tokens scattered"));
    room.success_pending = false;
    start_decoding(st, id, room);
  }
}

void on_chunk_ready(DecodeState& st, const Envelope& env, protocol::ChunkReady& c) {
  DecodeRoom* room = staged_room(st, env, c.room);
  if (!room || room->state.state() != KvState::waiting_for_input)
    return reject(st, env,
                  "room " + std::to_string(c.room) + " expects no staged chunk from '" + env.sender + "'");
  auto grant = st.ring.find(c.room, c.chunk);
  const uint64_t token_bytes = model::staging_token_bytes(room->src_layout);
  if (!grant || grant->offset != c.offset || grant->round != c.round || grant->bytes != c.bytes ||
      uint64_t(c.tokens) * token_bytes != c.bytes || uint64_t(c.first_token) + c.tokens > room->prompt_len ||
      c.first_token < room->held_tokens || room->ready.count(c.chunk)) {
    ++gauge(st).rejected;
    return fail_room(
        st, c.room,
        make_error(ErrorCode::invalid_request, "CHUNK_READY for chunk " + std::to_string(c.chunk) +
                                                   " (offset " + std::to_string(c.offset) + ", round " +
                                                   std::to_string(c.round) + ", " + std::to_string(c.bytes) +
                                                   " bytes, tokens " + std::to_string(c.first_token) + "+" +
                                                   std::to_string(c.tokens) + ") does not match its grant"));
  }
  room->ready.emplace(c.chunk, c);
  if (st.settings.staging_scatter_delay.count() > 0)
    st.self->delayed_send(st.self, st.settings.staging_scatter_delay, scatter_atom::value, c.room, c.chunk);
  else
    scatter(st, c.room, c.chunk);
}

void on_kv_status(DecodeState& st, const Envelope& env, protocol::KvStatus& kv) {
  DecodeRoom* found = st.rooms.find(kv.room);
  if (!found || found->prefill != env.sender ||
      (found->prefill_inc != 0 && found->prefill_inc != env.incarnation)) {
    // A Failed for a room we already dropped (the router cancelled it first) is the normal race.
    if (kv.state == KvState::failed && !found) return;
    spdlog::warn("decode: KV_STATUS for room {} from '{}' does not match any room here", kv.room, env.sender);
    st.ctx.bridge->send(env.sender, protocol::ErrorReply{ErrorCode::unknown_room, "no such room here",
                                                         uint16_t(MessageType::kv_status), kv.room});
    return;
  }
  DecodeRoom& room = *found;
  if (kv.state == KvState::failed) {
    // Prefill failed the room and holds no more writes for it.
    room.state.advance(KvState::transferring);
    fail_room(st, kv.room,
              make_error(kv.code == ErrorCode::ok ? ErrorCode::transfer_failed : kv.code,
                         "prefill '" + env.sender + "': " + kv.reason));
    return;
  }
  if (kv.state == KvState::transferring && room.state.state() == KvState::waiting_for_input) {
    // Prefill computed a chunk of the room: the rest of its KV is due within waiting_timeout from now.
    room.kv_started = true;
    room.kv_deadline = kernel::DeadlineTimer::now(st.self) + st.settings.waiting_timeout;
    arm_timeout(st);
    return;
  }
  if (kv.state != KvState::success) return;  // other progress reports need no action
  AuxRecord aux;
  std::memcpy(&aux, st.aux_base + uint64_t(room.aux_slot) * sizeof(AuxRecord), sizeof aux);
  if (aux.stamp != kv.room) {
    room.state.advance(KvState::transferring);
    fail_room(st, kv.room,
              make_error(ErrorCode::corrupt_kv, "aux stamp " + std::to_string(aux.stamp) + " != room " +
                                                    std::to_string(kv.room) + " after Success from '" +
                                                    env.sender + "'"));
    return;
  }
  if (aux.first_token >= st.ctx.model.vocab) {
    room.state.advance(KvState::transferring);
    fail_room(st, kv.room, make_error(ErrorCode::corrupt_kv, "first token out of vocabulary"));
    return;
  }
  // The first token's log-probabilities come with the news that it is there (prefill drew it).
  if (room.sampling.logprobs &&
      !(kv.first_logprobs && protocol::logprobs_fit(*kv.first_logprobs, 1, room.sampling.top_logprobs))) {
    room.state.advance(KvState::transferring);
    fail_room(st, kv.room,
              make_error(ErrorCode::corrupt_kv,
                         "KV_STATUS Success from '" + env.sender + "' lacks the first token's logprobs"));
    return;
  }
  room.kv = kv;
  room.first_token = aux.first_token;
  if (room.staged && room.scattered < room.prompt_len) {
    room.state.advance(KvState::transferring);  // prefill writes nothing more
    if (room.ready.empty())
      return fail_room(
          st, kv.room,
          make_error(ErrorCode::corrupt_kv, "staged KV incomplete after Success from '" + env.sender +
                                                "': " + std::to_string(room.scattered) + " of " +
                                                std::to_string(room.prompt_len) + " tokens scattered"));
    room.success_pending = true;  // the last scatter joins it
    return;
  }
  start_decoding(st, kv.room, room);
}

// A finished answer's KV stays in its pages: the next turn of a chat resends prompt + answer, so the cache
// keeps the pages of both, the partial last one too (the loop wrote K/V for every token but the last, which
// it never fed).
void keep_answer_pages(DecodeState& st, DecodeRoom& room, std::span<const uint32_t> answer) {
  if (!st.prefix->enabled() || answer.empty()) return;
  std::vector<uint32_t> seq = room.prompt;
  seq.insert(seq.end(), answer.begin(), answer.end() - 1);
  seq.resize(shareable(st, room, seq.size()));
  auto keys = page_keys(seq, st.layout.page_size, model::image_token(st.ctx.model), room.images,
                        /*tail=*/true);
  std::vector<uint32_t> evicted;
  st.prefix->adopt(room.prefix, keys, room.pages, evicted);
  st.pages.free(evicted);
}

void on_finished(DecodeState& st, DecodeFinished& f) {
  DecodeRoom* found = st.rooms.find(f.room);
  if (!found) return;
  DecodeRoom& room = *found;
  if (f.ok) {
    keep_answer_pages(st, room, f.tokens);
    protocol::RoomResult r;
    r.room = f.room;
    r.ok = true;
    r.tokens = std::move(f.tokens);
    r.encode_us = room.kv.encode_us;
    r.prefill_us = room.kv.prefill_us;
    r.transfer_us = room.kv.transfer_us;
    r.decode_us = f.decode_us;
    if (room.sampling.logprobs) r.logprobs = to_wire(f.logprobs, room.sampling.top_logprobs);
    spdlog::debug("decode: {} done: {} tokens", kernel::room_tag(f.room, room.request_id), r.tokens.size());
    st.ctx.bridge->send(room.router, std::move(r));
  } else if (f.error.code != ErrorCode::aborted) {
    kernel::announce_failure(st.bridge(), "decode", f.room, room.request_id, room.router, f.error);
  } else if (room.cancelled) {
    ++st.ctx.load->cancelled_rooms;  // the loop dropped it from its batch
  }
  release(st, f.room, room);
  st.rooms.end(f.room);
  publish_load(st);
}

// A live room ends (counted): one decoding leaves the batch before its next step (the loop answers with
// DecodeFinished(aborted) unless it finished first), one waiting for its KV is aborted at prefill too.
// Pages and the aux slot are freed either way (after quarantine if prefill may still write them).
void on_cancel(DecodeState& st, const Envelope&, protocol::Cancel& c) {
  DecodeRoom* room = st.rooms.find(c.room);
  if (!room || room->cancelled) return;
  spdlog::debug("decode: {} cancelled: {}", kernel::room_tag(c.room, room->request_id), c.reason);
  if (room->state.state() == KvState::success) {
    room->cancelled = true;
    st.self->send(st.loop, DecodeDrop{c.room});
    return;
  }
  ++st.ctx.load->cancelled_rooms;
  fail_room(st, c.room, make_error(ErrorCode::aborted, c.reason), Notify{.router = false});
}

// The drain ran out of time (run_role, RoleHandle::hand_over): every room goes back to its router as
// handed_over. One decoding leaves the batch after the step in progress, so every token it drew has been
// streamed before its RESULT says so; the router goes on from there on another prefill/decode. One still
// waiting for its KV starts again elsewhere.
void hand_over(DecodeState& st) {
  const auto stopping =
      make_error(ErrorCode::handed_over, "decode '" + st.ctx.instance->id + "' is stopping");
  std::vector<uint64_t> waiting;
  uint32_t decoding = 0;
  for (auto& [id, room] : st.rooms) {
    if (room.state.state() != KvState::success) {
      waiting.push_back(id);
    } else if (!room.cancelled) {
      ++decoding;
      st.self->send(st.loop, DecodeDrop{id, stopping});
    }
  }
  spdlog::warn("decode: handing over {} room(s) decoding and {} waiting for KV: this instance is stopping",
               decoding, waiting.size());
  for (uint64_t id : waiting) fail_room(st, id, stopping);
}

void on_deadline(DecodeState& st) {
  st.deadline.fired();
  std::vector<std::tuple<uint64_t, std::string, bool>> late;  // room, prefill, started there
  const auto now = kernel::DeadlineTimer::now(st.self);
  for (const auto& [id, room] : st.rooms)
    if (room.state.state() == KvState::waiting_for_input && room.kv_deadline <= now)
      late.emplace_back(id, room.prefill, room.kv_started);
  for (const auto& [room, prefill, started] : late)
    fail_room(
        st, room,
        make_error(ErrorCode::waiting_timeout,
                   started ? "KV for room " + std::to_string(room) + " did not arrive from '" + prefill +
                                 "' within " + std::to_string(st.settings.waiting_timeout.count()) +
                                 " ms of its last chunk there"
                           : "prefill '" + prefill + "' did not start room " + std::to_string(room) +
                                 " within the request's time left and " +
                                 std::to_string(st.settings.waiting_timeout.count()) + " ms"));
  arm_timeout(st);
}

void on_peer_changes(DecodeState& st, const PeerChanges& pc) {
  for (const auto& c : pc.changes) {
    auto affected = kernel::sharing_lost_peer(st.rooms, c);
    if (!affected.empty())
      spdlog::warn("decode: failing {} room(s) shared with '{}' (incarnation {})", affected.size(), c.id,
                   c.old_incarnation);
    for (uint64_t id : affected) {
      // A room already decoding for a router that is gone: nobody wants its tokens.
      if (st.rooms.find(id)->state.state() == KvState::success) {
        st.self->send(st.loop, DecodeDrop{id});
        continue;
      }
      fail_room(st, id, kernel::peer_lost_error(c));
    }
    // A new incarnation of a prefill proves the old one writes nothing any more: it was restarted (the old
    // process is gone) or it rejoined after the registry dropped it (it drained its writes first). After
    // the sweep, so the rooms it just failed (quarantined: they were waiting for its KV) are freed too.
    if (c.new_incarnation != 0) {
      std::vector<uint64_t> done;
      for (auto& [id, room] : st.quarantine)
        if (room.prefill == c.id && room.prefill_inc != c.new_incarnation) done.push_back(id);
      for (uint64_t id : done) end_quarantine(st, id);
    }
    publish_load(st);
  }
}

using Table = kernel::MessageTable<DecodeState>;

caf::behavior decode_role(caf::stateful_actor<DecodeState>* self, RoleContext ctx,
                          kernel::TablePtr<DecodeState> table, DecodeSettings settings) {
  auto& st = kernel::start(self, std::move(ctx));
  st.ctx.load->room_phases.declare({"waiting_for_kv", "decoding"});
  st.settings = settings;
  st.layout = settings.layout;
  st.pages = PageAllocator(settings.kv_pages);
  st.aux = PageAllocator(settings.aux_slots);
  st.prefix = std::make_unique<PrefixCache>(settings.prefix_cache_pages);
  export_prefix_cache(*st.ctx.metrics, st.prefix->stats());
  const auto* kv = find_local_region(*st.ctx.engine, kKvRegion);
  const auto* aux = find_local_region(*st.ctx.engine, kAuxRegion);
  st.aux_base = aux->base;
  st.kv_base = kv->addr();
  st.pool = model::KvPool{reinterpret_cast<std::byte*>(kv->base), st.layout};
  if (settings.staging_ring_bytes > 0) {
    // The ring is the whole region as published (the engine may round its size up): prefill sizes it from
    // the same descriptor.
    const auto* region = find_local_region(*st.ctx.engine, kStagingRegion);
    st.ring = StagingRing(region->length);
    st.ring_base = region->base;
    gauge(st).ring_bytes = region->length;
    gauge(st).active = true;
  }
  DecodeLoopConfig lc;
  lc.model = st.ctx.model;
  lc.pool = st.pool;
  lc.max_batch = settings.max_batch;
  lc.detached = st.ctx.detached_workers;
  lc.step_delay = settings.step_delay;
  lc.steps = &st.ctx.metrics->counter("epd_decode_steps_total", "Decode steps").Add({});
  lc.step_sequences =
      &st.ctx.metrics->counter("epd_decode_step_sequences_total", "Sequences advanced by decode's steps")
           .Add({});
  st.loop = spawn_decode_loop(*st.ctx.system, st.ctx.bridge, lc, caf::actor_cast<caf::actor>(self));
  self->link_to(st.loop);
  publish_load(st);
  return kernel::role_behavior(
      self, table,
      {
          [=](DecodeFinished& f) { on_finished(self->state, f); },
          [=](hand_over_atom) { hand_over(self->state); },
          [=](timeout_atom) { on_deadline(self->state); },
          [=](abort_done_atom, uint64_t room) { on_abort_timeout(self->state, room); },
          [=](scatter_atom, uint64_t room, uint32_t chunk) { scatter(self->state, room, chunk); },
          [=](PeerChanges& pc) { on_peer_changes(self->state, pc); },
      });
}

protocol::Result<RoleHandle> spawn_decode(RoleContext& ctx, DecodeSettings s) {
  auto budget = prefix_cache_budget(s.prefix_cache_pages, s.kv_pages, "decode");
  if (!budget) return budget.error();
  s.prefix_cache_pages = *budget;
  const auto& layout = s.layout;
  // Both fenced: a prefill writes them only under the room's grant (BOOTSTRAP's fence).
  if (auto r = ctx.engine->allocate(kKvRegion, layout.total_bytes(), layout.page_bytes()); !r)
    return r.error();
  if (auto r = ctx.engine->allocate(kAuxRegion, uint64_t(s.aux_slots) * sizeof(AuxRecord), sizeof(AuxRecord));
      !r)
    return r.error();
  if (s.staging_ring_bytes > 0)
    if (auto r = ctx.engine->allocate(kStagingRegion, s.staging_ring_bytes); !r) return r.error();
  spdlog::info(
      "decode: KV pool of {} pages ({}, {} MiB), up to {} of them kept by the prefix cache, {} aux slots, "
      "staging ring of {} KiB",
      s.kv_pages, describe_layout(layout), layout.total_bytes() >> 20, s.prefix_cache_pages, s.aux_slots,
      s.staging_ring_bytes >> 10);
  auto table = std::make_shared<Table>();
  table->on<protocol::Submit>(on_submit)
      .on<protocol::KvStatus>(on_kv_status)
      .on<protocol::Cancel>(on_cancel)
      .on<protocol::AbortAck>(on_abort_ack)
      .on<protocol::StagingReq>(on_staging_req)
      .on<protocol::ChunkReady>(on_chunk_ready);
  auto main = kernel::spawn_main(ctx, decode_role, kernel::TablePtr<DecodeState>(table), s);
  if (!main) return main.error();
  RoleHandle h{*main, layout, s.kv_pages, {}, {}, {}};
  h.hand_over = [main = *main] { caf::anon_send(main, hand_over_atom::value); };
  return h;
}

}  // namespace

RoleSpec decode_role_spec() {
  kernel::SettingsSchema<DecodeSettings> settings;
  settings.u32("kv_pages", &DecodeSettings::kv_pages, 1, kMaxKvPages)
      .u32("aux_slots", &DecodeSettings::aux_slots, 1, 1u << 20)
      .u32("max_batch", &DecodeSettings::max_batch, 1, 4096)
      .ms("waiting_timeout_ms", &DecodeSettings::waiting_timeout)
      .ms("abort_timeout_ms", &DecodeSettings::abort_timeout)
      .u64("staging_ring_bytes", &DecodeSettings::staging_ring_bytes, 0, uint64_t{1} << 36)
      .ms("staging_scatter_delay_ms", &DecodeSettings::staging_scatter_delay)
      .ms("step_delay_ms", &DecodeSettings::step_delay)
      .u32("prefix_cache_pages", &DecodeSettings::prefix_cache_pages, 0, 1u << 24);
  kernel::kv_layout_settings(settings, &DecodeSettings::layout, &DecodeSettings::kv_pages);
  RoleSpec spec = kernel::make_role_spec(
      "decode", "generates tokens from KV pages prefill wrote into its pool (continuous batching)", true,
      std::move(settings), spawn_decode);
  spec.runs_model = true;
  return spec;
}

}  // namespace epd::actors
