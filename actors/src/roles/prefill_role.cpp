// The prefill role. A room becomes runnable when its SUBMIT (router), BOOTSTRAP (decode) and — for an image
// prompt — its embeddings (encoder) are all in, whatever order they arrive in. It then runs chunked prefill
// on the compute actor; after each chunk the completed pages go to decode's pool through the room's transfer
// worker (contiguous runs merged), and after the last chunk the aux record goes last, then KV_STATUS
// Success. A failure at any step fails exactly this room, on both sides, with its cause.
// Embeddings that landed are kept in the embedding cache by their image's content hash (EMBED_META's); a
// later room with the same hash copies them into its landing slot and tells the encoder not to write.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "epd/actors/aux_record.hpp"
#include "epd/actors/kernel/role_settings.hpp"
#include "epd/actors/process_metrics.hpp"
#include "epd/model/chunk_grid.hpp"
#include "epd/model/kv_cache.hpp"
#include "epd/model/kv_staging.hpp"
#include "epd/model/mmproj.hpp"
#include "prefill_state.hpp"
#include "roles/kv_write_plan.hpp"
#include "roles/logprobs_wire.hpp"
#include "roles/prefill_compute.hpp"
#include "roles/roles.hpp"

namespace epd::actors::prefill {
namespace {

using protocol::Envelope;
using protocol::ErrorCode;
using protocol::make_error;
constexpr uint64_t kAuxTag = ~uint64_t{0};
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
    st.self->delayed_send(st.self, st.settings.report_delay, HeldReport{to, std::move(body)});
  else
    st.ctx.bridge->send(to, std::move(body));
}

// Why a room that an encoder still works for is over here: its failure (the root cause, which the encoder
// passes on to the router with its retryability), or nullopt while it is still open.
std::optional<protocol::Error> ended_cause(const PrefillState& st, uint64_t id) {
  if (const auto* ended = st.rooms.ended(id)) {
    if (ended->code == ErrorCode::ok) return make_error(ErrorCode::aborted, "room already completed");
    return *ended;
  }
  if (const auto* r = st.rooms.find(id); r && r->state.state() == KvState::failed) return r->state.failure();
  return std::nullopt;
}

}  // namespace

void publish_load(PrefillState& st) {
  // Cached pages no room references are free as far as placement goes: a room that needs them evicts them.
  st.ctx.load->free_kv_pages = st.pages.free_count() + st.prefix->evictable();
  publish_prefix_cache(*st.ctx.load, *st.prefix);
  st.ctx.load->total_kv_pages = st.pages.total();
  st.ctx.load->free_slots = st.slots.free_count();
  st.ctx.load->total_slots = st.slots.total();
  st.ctx.load->active_rooms = uint32_t(st.rooms.size());
  uint32_t writing = 0;
  std::array<uint32_t, 5> phases{};  // by Progress, then failed rooms: the order declared at start
  for (const auto& [_, r] : st.rooms) {
    writing += uint32_t(r.outstanding.size());
    ++phases[r.state.state() == KvState::failed ? 4 : size_t(r.progress)];
  }
  st.ctx.load->writes_in_flight = writing;
  st.ctx.load->room_phases.publish(phases);
}

// Rooms that have not started by created + bootstrap_timeout fail.
void arm_timeout(PrefillState& st) {
  st.deadline.arm(st.self, kernel::earliest(st.rooms, [&](const PrefillRoom& r) {
                    return r.waits_for_inputs() ? std::optional(r.created + st.settings.bootstrap_timeout)
                                                : std::nullopt;
                  }));
}

PrefillRoom& room_for(PrefillState& st, uint64_t id) {
  bool created = false;
  PrefillRoom& r = st.rooms.find_or_create(id, created);
  if (created) {
    r.created = kernel::DeadlineTimer::now(st.self);
    // Until its SUBMIT names the router: the embedded registry's router; with etcd there are several and
    // none is known yet (decode hears of a failure through KV_STATUS and tells its router).
    if (!st.ctx.cluster->uses_etcd()) r.router = st.ctx.cluster->cluster.registry;
    r.worker = uint32_t(id % st.workers.size());
    arm_timeout(st);
    publish_load(st);
  }
  return r;
}

// The room's KV pages go: its own back to the allocator, its references to cached ones dropped (those stay
// in the cache).
void release_pages(PrefillState& st, PrefillRoom& r) {
  std::span<const uint32_t> own(r.local_pages);
  st.pages.free(own.subspan(std::min(r.prefix.size(), own.size())));
  st.prefix->release(r.prefix);
  r.local_pages.clear();
}

// `n` free local pages, evicting cached pages no room references when the allocator has too few.
std::optional<std::vector<uint32_t>> allocate_pages(PrefillState& st, uint32_t n) {
  if (n > st.pages.free_count()) st.pages.free(st.prefix->evict(n - st.pages.free_count()));
  return st.pages.allocate(n);
}

// Frees the room once nothing can touch its memory any more: no write in flight, no compute running, no
// encoder writing its landing slot. Sends the deferred KV_STATUS Failed / ABORT_ACK first.
void maybe_reap(PrefillState& st, uint64_t id) {
  PrefillRoom* found = st.rooms.find(id);
  if (!found) return;
  PrefillRoom& r = *found;
  if (!r.state.terminal() || !r.outstanding.empty()) return;
  if (r.state.state() == KvState::failed && r.news != DecodeNews::none && !r.decode.empty()) {
    const bool ack = r.news == DecodeNews::abort_ack;
    r.news = DecodeNews::none;
    if (ack) {
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
  if (r.computing() || r.embed == Embed::writing) return;
  release_stage_slots(st, r);
  if (r.embed_fence != 0) st.ctx.engine->revoke_writes(r.embed_fence);
  release_pages(st, r);
  if (r.landing) st.slots.free(std::span<const uint32_t>(&*r.landing, 1));
  if (r.aux_src) st.aux.free(std::span<const uint32_t>(&*r.aux_src, 1));
  protocol::Error outcome =
      r.state.state() == KvState::failed ? r.state.failure() : protocol::Error{ErrorCode::ok, false, ""};
  st.rooms.end(id, std::move(outcome));
  publish_load(st);
}

// The encoder will not report on the room's landing slot (it failed, is dead to us, or timed out): the slot
// may be reused once the encoder certainly cannot write it - its write arrives only through backends that
// refuse revoked grants (tcp, rdma), or its process is gone - and then the grant is revoked. A same-host
// encoder that may just be frozen (shm) keeps the slot held until it reports, restarts or dies.
void stop_waiting_for_embeddings(PrefillState& st, PrefillRoom& r) {
  const auto& engine = *st.ctx.engine;
  const auto& seg = r.encoder_segment;
  if (seg && !engine.fences_writes_from(*seg) && !engine.writer_gone(*seg)) return;
  if (r.embed_fence != 0 && !st.ctx.engine->revoke_writes(r.embed_fence)) return;  // a write is landing
  r.embed_fence = 0;
  r.embed = Embed::none;
}

void fail_room(PrefillState& st, uint64_t id, protocol::Error error, Notify notify) {
  PrefillRoom* found = st.rooms.find(id);
  if (!found) return;
  PrefillRoom& r = *found;
  if (!r.state.fail(error)) return maybe_reap(st, id);  // e.g. the last write of a failed room just ended
  // The report may be held back (report_delay_ms), so it is sent here rather than by announce_failure.
  kernel::announce_failure(st.bridge(), "prefill", id, r.request_id(), r.router, error, false);
  // Chunks not computed yet never will be; compute answers with the room's last ChunkComputed.
  if (r.computing()) st.self->send(st.compute, PrefillDrop{id});
  if (notify.router && !r.router.empty()) send_failure_news(st, r.router, failure_result(id, error));
  if (r.embed == Embed::writing && !r.encoder.empty() && !st.bridge().peers().alive(r.encoder))
    stop_waiting_for_embeddings(st, r);  // the encoder is dead to us: free the slot if it cannot write it
  // An encoder that lost the room never sends EMBED_DONE: stop waiting for it after a bound (its write,
  // if any, takes milliseconds).
  if (r.embed == Embed::writing)
    st.self->delayed_send(st.self, st.settings.bootstrap_timeout, giveup_atom::value, id);
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
  PrefillRoom& r = *st.rooms.find(id);
  if (!r.waits_for_inputs() || !r.have_submit || !r.have_bootstrap) return;
  const bool needs_image = r.submit.image_tokens > 0;
  if (needs_image && r.embed != Embed::ready) return;
  const auto& prompt = r.submit.prompt;
  auto target = decode_target(st, r.decode);
  if (!target) return fail_room(st, id, target.error());
  const uint32_t need_dst = model::pages_for(target->layout, prompt.size());  // in decode's page size
  // What decode holds already (its prefix cache), from the prompt's start: whole pages, or any number of
  // tokens where a page can be written from a token on (token-major pages; the staged path).
  const bool any_token = target->staged || target->layout.order == protocol::KvDimOrder::token_head_dim;
  if (r.boot.held_tokens > prompt.size() ||
      (!any_token && r.boot.held_tokens % target->layout.page_size != 0))
    return fail_room(
        st, id,
        make_error(
            ErrorCode::invalid_request,
            "BOOTSTRAP says decode holds " + std::to_string(r.boot.held_tokens) + " tokens: not " +
                (any_token ? std::string("within")
                           : "whole pages of " + std::to_string(target->layout.page_size) + " within") +
                " the prompt of " + std::to_string(prompt.size())));
  if (r.boot.dst_pages.size() != need_dst || r.boot.prompt_len != prompt.size())
    return fail_room(
        st, id,
        make_error(ErrorCode::invalid_request,
                   "BOOTSTRAP names " + std::to_string(r.boot.dst_pages.size()) + " pages for " +
                       std::to_string(r.boot.prompt_len) + " tokens; the prompt has " +
                       std::to_string(prompt.size()) + " tokens in " + std::to_string(need_dst) + " pages"));
  const uint32_t need = model::pages_for(st.layout, prompt.size());
  r.staged = target->staged;
  // The longest cached prefix of whole pages, short of the last token (its logits draw the first token).
  // Where the model's bits depend on the chunking, it also ends on the grid and before a resumed answer's
  // tokens (decode steps compute those), and only whole chunks of the grid are cached (chunk_grid.hpp).
  const model::ChunkGrid grid(st.ctx.model, st.settings.chunk_tokens);
  const uint32_t n = uint32_t(prompt.size());
  const uint32_t asked = n - std::min(n, r.submit.resume_from);  // the prompt the client wrote
  const uint32_t reusable = grid.exact() ? n - 1 : std::min(n - 1, asked);
  r.shareable_tokens = grid.shareable(prompt, asked);
  r.page_keys = page_keys(prompt, st.layout.page_size, model::image_token(st.ctx.model), r.embed_hash);
  // Never a start inside a bidirectional image (Gemma 3's): no chunk starts there.
  r.prefix =
      st.prefix->acquire(r.page_keys, reusable / st.layout.page_size, n, grid.page_step(st.layout.page_size),
                         [&](uint64_t start) { return !grid.cuts_image(prompt, uint32_t(start)); });
  r.local_pages = r.prefix.pages();
  auto pages = allocate_pages(st, need - uint32_t(r.prefix.size()));
  auto aux = st.aux.allocate(1);
  if (!pages || !aux) {
    if (pages) st.pages.free(*pages);
    if (aux) st.aux.free(*aux);
    return fail_room(
        st, id,
        make_error(ErrorCode::out_of_capacity, "prefill has " + std::to_string(st.pages.free_count()) +
                                                   " free pages (" + std::to_string(st.prefix->pages()) +
                                                   " cached, in use by other rooms), room needs " +
                                                   std::to_string(need - r.prefix.size()) + " more"));
  }
  r.local_pages.insert(r.local_pages.end(), pages->begin(), pages->end());
  r.cached_tokens = uint32_t(r.prefix.size()) * st.layout.page_size;
  r.aux_src = (*aux)[0];
  // What decode holds is not written. On the direct path decode's pages are ours too: its whole pages
  // are skipped, and the first page written starts after the tokens it holds of it.
  if (r.staged) {
    r.tokens_staged = r.boot.held_tokens;
  } else if (r.boot.held_tokens == prompt.size()) {
    r.pages_sent = need_dst;
  } else {
    r.pages_sent = r.boot.held_tokens / st.layout.page_size;
    r.held_in_page = r.boot.held_tokens % st.layout.page_size;
  }
  st.prefix->stats()->bytes_not_sent += uint64_t(r.boot.held_tokens) * model::staging_token_bytes(st.layout);
  r.progress = Progress::computing;
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
  job.start = r.cached_tokens;
  job.chunk_tokens = st.settings.chunk_tokens;
  job.sampling = sampling_of(r.submit);
  job.first_index = r.submit.resume_from;
  job.grammar = r.submit.grammar;
  job.positions = r.positions;
  publish_load(st);
  spdlog::debug("prefill: {} starts: {} prompt tokens ({} cached) for decode '{}'{}",
                kernel::room_tag(id, r.request_id()), prompt.size(), r.cached_tokens, r.decode,
                r.staged ? " (staged)" : "");
  caf::anon_send(st.compute, std::move(job));
}

// Sends a write job through the room's worker (another live one if its worker is down); false, with the
// room failed, when no worker is alive.
bool dispatch(PrefillState& st, uint64_t id, PrefillRoom& r, TransferJob job) {
  auto worker = st.workers.live(r.worker);
  if (!worker) {
    fail_room(st, id,
              make_error(ErrorCode::worker_crashed, "no transfer worker is alive (restart budget spent)"));
    return false;
  }
  r.worker = *worker;
  job.peer_incarnation = r.decode_inc;
  r.outstanding.insert_or_assign(job.tag, job);
  st.self->send(st.workers.at(r.worker), std::move(job));
  publish_load(st);
  return true;
}

// `last_tokens`: the prompt's last page holds only that many tokens (0: whole pages).
void send_pages(PrefillState& st, uint64_t id, PrefillRoom& r, uint32_t upto, uint64_t tag,
                uint32_t last_tokens = 0) {
  if (upto <= r.pages_sent) return;
  auto target = decode_target(st, r.decode);
  if (!target) return fail_room(st, id, target.error());
  KvSide src{st.layout, st.kv_base, r.local_pages};
  KvSide dst{target->layout, target->kv_base, r.boot.dst_pages};
  auto ops = plan_kv_writes(src, dst, r.pages_sent, upto, upto == r.local_pages.size() ? last_tokens : 0,
                            r.held_in_page);
  r.held_in_page = 0;
  for (auto& op : ops) op.fence = r.boot.fence;
  TransferJob job{id, tag, r.decode, 0, std::move(ops), caf::actor_cast<caf::actor>(st.self)};
  r.pages_sent = upto;
  dispatch(st, id, r, std::move(job));
}

void maybe_send_aux(PrefillState& st, uint64_t id, PrefillRoom& r) {
  if (r.progress != Progress::computed || !r.outstanding.empty() || r.state.terminal() || !staged_all_done(r))
    return;
  auto target = decode_target(st, r.decode);
  if (!target) return fail_room(st, id, target.error());
  AuxRecord rec{r.first_token, 0, id};
  uint8_t* src = st.aux_base + uint64_t(*r.aux_src) * sizeof(AuxRecord);
  std::memcpy(src, &rec, sizeof rec);
  transport::WriteOp op{reinterpret_cast<uint64_t>(src),
                        target->aux_base + uint64_t(r.boot.aux_slot) * sizeof(AuxRecord), sizeof(AuxRecord),
                        r.boot.fence};
  r.progress = Progress::aux_sent;
  dispatch(st, id, r, TransferJob{id, kAuxTag, r.decode, 0, {op}, caf::actor_cast<caf::actor>(st.self)});
}

void on_chunk(PrefillState& st, ChunkComputed& c) {
  if (c.opens_pass) st.passes->Increment();
  st.pass_chunks->Increment();
  PrefillRoom* found = st.rooms.find(c.room);
  if (!found) return;
  PrefillRoom& r = *found;
  r.prefill_us += c.compute_us;
  if (c.last) {  // compute reads nothing of the room any more; the aux record goes once all is written
    r.progress = Progress::computed;
    r.first_token = c.first_token;
    r.first_logprobs = std::move(c.first_logprobs);
  }
  if (c.last && c.ok) {  // every whole page holds its prompt's KV now: the cache may keep those it may share
    std::vector<uint32_t> evicted;
    const size_t keep = std::min<size_t>(r.page_keys.size(), r.shareable_tokens / st.layout.page_size);
    st.prefix->adopt(r.prefix, std::span(r.page_keys).first(keep), r.local_pages, evicted);
    st.pages.free(evicted);
  }
  if (!c.ok) return fail_room(st, c.room, c.error);
  if (r.state.terminal()) return maybe_reap(st, c.room);
  if (!r.told_started || !c.last) {
    // Decode waits for a started room's KV within its waiting_timeout of the last chunk it heard of; until
    // the first, the room may have queued here behind other prompts, which is no fault
    // (docs/failure-handling.md, "Deadlines").
    r.told_started = true;
    protocol::KvStatus started;
    started.room = c.room;
    started.state = KvState::transferring;
    st.ctx.bridge->send(r.decode, std::move(started));
  }
  if (r.staged) {
    stage_tokens(st, c.room, r, c.last ? uint32_t(r.submit.prompt.size()) : c.end, c.last);
  } else {
    const uint32_t complete = c.last ? uint32_t(r.local_pages.size()) : c.end / st.layout.page_size;
    // The last page's slots past the prompt hold nothing decode reads (it writes them as it generates).
    send_pages(st, c.room, r, complete, c.chunk,
               c.last ? uint32_t(r.submit.prompt.size() % st.layout.page_size) : 0);
  }
  // A failure on the way may have failed the room, and an idle failed room is reaped at once.
  if (!st.rooms.contains(c.room) || r.state.terminal()) return;
  if (c.last) {
    // The landing slot is no longer read by compute.
    if (r.landing && r.embed != Embed::writing) {
      if (r.embed_fence != 0 && st.ctx.engine->revoke_writes(r.embed_fence)) r.embed_fence = 0;
      st.slots.free(std::span<const uint32_t>(&*r.landing, 1));
      r.landing.reset();
      publish_load(st);
    }
    maybe_send_aux(st, c.room, r);
  }
}

void on_transfer_done(PrefillState& st, TransferDone& d) {
  PrefillRoom* found = st.rooms.find(d.room);
  if (!found) return;
  PrefillRoom& r = *found;
  if (r.outstanding.erase(d.tag) == 0) return;  // a job whose worker's crash was handled already
  publish_load(st);
  if (r.staged && d.tag != kAuxTag) return on_staged_write_done(st, r, d);
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
    // The first token travels in the aux record; its log-probabilities, which do not fit there, here.
    if (r.submit.logprobs) kv.first_logprobs = to_wire({&r.first_logprobs, 1}, r.submit.top_logprobs);
    kv.shareable_tokens = r.shareable_tokens;
    r.news = DecodeNews::none;
    st.ctx.bridge->send(r.decode, std::move(kv));
    spdlog::debug("prefill: {} KV written to '{}'", kernel::room_tag(d.room, r.request_id()), r.decode);
    return maybe_reap(st, d.room);
  }
  maybe_send_aux(st, d.room, r);
}

void on_submit(PrefillState& st, const Envelope& env, protocol::Submit& msg) {
  if (msg.room == 0 || st.rooms.ended(msg.room)) return;
  PrefillRoom& r = room_for(st, msg.room);
  if (r.have_submit || r.state.terminal()) return;
  r.router = env.sender;
  r.router_inc = env.incarnation;
  r.submit.request_id = msg.request_id;  // in the logs, also of a refusal below
  // Only the reference vocabulary has an IMAGE token; in a checkpoint's vocabulary its id is ordinary text.
  const auto slot = model::image_token(st.ctx.model);
  const uint32_t image_tokens = slot ? uint32_t(std::count(msg.prompt.begin(), msg.prompt.end(), *slot)) : 0;
  if (msg.prompt.empty() || msg.prompt.size() >= st.ctx.model.max_seq || image_tokens != msg.image_tokens ||
      (image_tokens > 0 && msg.encoder.empty()) || msg.decode.empty())
    return fail_room(st, msg.room,
                     make_error(ErrorCode::invalid_request,
                                "SUBMIT: prompt of " + std::to_string(msg.prompt.size()) + " tokens with " +
                                    std::to_string(image_tokens) + " image tokens (says " +
                                    std::to_string(msg.image_tokens) + "), encoder '" + msg.encoder +
                                    "', decode '" + msg.decode + "'"));
  if (auto ok = model::validate(sampling_of(msg)); !ok) return fail_room(st, msg.room, ok.error());
  auto positions = positions_of(st.ctx.model, msg);
  if (!positions) return fail_room(st, msg.room, positions.error());
  r.positions = std::move(*positions);
  if (r.have_bootstrap && r.decode != msg.decode)
    return fail_room(st, msg.room,
                     make_error(ErrorCode::invalid_request,
                                "BOOTSTRAP came from '" + r.decode + "', SUBMIT names '" + msg.decode + "'"));
  if (!r.encoder.empty() && r.encoder != msg.encoder)
    return fail_room(st, msg.room,
                     make_error(ErrorCode::invalid_request, "EMBED_META came from '" + r.encoder +
                                                                "', SUBMIT names '" + msg.encoder + "'"));
  r.decode = msg.decode;
  r.encoder = msg.encoder;
  r.submit = std::move(msg);
  r.have_submit = true;
  maybe_start(st, r.submit.room);
}

void on_bootstrap(PrefillState& st, const Envelope& env, protocol::Bootstrap& msg) {
  if (st.rooms.ended(msg.room)) return;
  PrefillRoom& r = room_for(st, msg.room);
  if (r.have_bootstrap || r.state.terminal()) return;
  if (r.have_submit && r.decode != env.sender) {
    spdlog::warn("prefill: BOOTSTRAP for {} from '{}', expected '{}'",
                 kernel::room_tag(msg.room, r.request_id()), env.sender, r.decode);
    return;
  }
  r.decode = env.sender;
  r.decode_inc = env.incarnation;
  r.boot = std::move(msg);
  r.have_bootstrap = true;
  r.state.advance(KvState::waiting_for_input);
  maybe_start(st, r.boot.room);
}

// The room's embeddings are in the cache (same image hash and shape): copied into its landing slot (the
// entry is pinned while copied; an entry evicted before it is a miss and a normal transfer), the encoder is
// told no write is wanted, and the room may start.
bool use_cached_embeddings(PrefillState& st, const protocol::EmbedMeta& msg, PrefillRoom& r) {
  auto hit = st.cache->find(*r.embed_hash);
  if (!hit) return false;
  if (hit->bytes().size() != msg.bytes || hit->tokens() != msg.tokens) {
    spdlog::warn("prefill: cached embeddings of {} have another shape than EMBED_META says: transferred",
                 short_hex(*r.embed_hash));
    return false;
  }
  const uint64_t id = msg.room;
  std::memcpy(st.embed_base + uint64_t(*r.landing) * st.slot_bytes, hit->bytes().data(), msg.bytes);
  r.embed_bytes = msg.bytes;
  if (!st.bridge().send(r.encoder, protocol::EmbedPull{id, 0, msg.bytes, ErrorCode::ok, "", 0, true})) {
    fail_room(st, id,
              make_error(ErrorCode::peer_unreachable, "encoder '" + r.encoder + "' is not known here yet"));
    return true;
  }
  ++st.cache->stats()->transfers_skipped;
  r.embed = Embed::ready;
  spdlog::debug("prefill: {} embeddings from the cache ({}), no transfer",
                kernel::room_tag(id, r.request_id()), short_hex(*r.embed_hash));
  publish_load(st);
  maybe_start(st, id);
  return true;
}

void on_embed_meta(PrefillState& st, const Envelope& env, protocol::EmbedMeta& msg) {
  // Tell the encoder, so it frees its slot now and reports the room's real cause, not "aborted".
  if (auto cause = ended_cause(st, msg.room)) {
    st.bridge().send(
        env.sender, protocol::EmbedPull{msg.room, 0, 0, cause->code, "room already ended: " + cause->detail});
    return;
  }
  PrefillRoom& r = room_for(st, msg.room);
  if (r.landing || r.state.terminal()) return;
  if (!r.encoder.empty() && r.encoder != env.sender) {
    spdlog::warn("prefill: EMBED_META for {} from '{}', expected '{}'",
                 kernel::room_tag(msg.room, r.request_id()), env.sender, r.encoder);
    return;
  }
  const uint64_t expect = uint64_t(msg.tokens) * st.ctx.model.d_model * sizeof(float);
  if (msg.dim != st.ctx.model.d_model || msg.bytes != expect || msg.bytes > st.slot_bytes ||
      (r.have_submit && msg.tokens != r.submit.image_tokens)) {
    st.bridge().send(env.sender, protocol::EmbedPull{msg.room, 0, 0, ErrorCode::invalid_request,
                                                     "embedding shape does not match the prompt"});
    return fail_room(
        st, msg.room,
        make_error(ErrorCode::invalid_request,
                   "EMBED_META: " + std::to_string(msg.tokens) + "x" + std::to_string(msg.dim) + " = " +
                       std::to_string(msg.bytes) + " bytes does not fit this model/slot"));
  }
  auto slot = st.slots.allocate(1);
  if (!slot) {
    st.bridge().send(env.sender, protocol::EmbedPull{msg.room, 0, 0, ErrorCode::out_of_capacity,
                                                     "no free embedding slot"});
    return fail_room(st, msg.room, make_error(ErrorCode::out_of_capacity, "no free embedding landing slot"));
  }
  r.landing = (*slot)[0];
  r.encoder = env.sender;  // the one that may write the slot from now on
  r.encoder_inc = env.incarnation;
  r.embed_hash = content_hash_from(msg.content_hash);
  if (r.embed_hash && use_cached_embeddings(st, msg, r)) return;
  if (auto enc = st.bridge().peers().find(env.sender)) r.encoder_segment = enc->segment;
  const uint64_t unit = *r.landing;
  r.embed_fence = st.ctx.engine->grant_writes(reinterpret_cast<uint64_t>(st.embed_base), {&unit, 1});
  r.embed_bytes = msg.bytes;
  r.embed = Embed::writing;
  publish_load(st);
  const uint64_t addr = reinterpret_cast<uint64_t>(st.embed_base) + uint64_t(*r.landing) * st.slot_bytes;
  if (!st.bridge().send(env.sender,
                        protocol::EmbedPull{msg.room, addr, msg.bytes, ErrorCode::ok, "", r.embed_fence})) {
    r.embed = Embed::none;  // nobody was asked to write the slot; fail_room frees it
    return fail_room(
        st, msg.room,
        make_error(ErrorCode::peer_unreachable, "encoder '" + env.sender + "' is not known here yet"));
  }
}

void on_embed_done(PrefillState& st, const Envelope& env, protocol::EmbedDone& msg) {
  PrefillRoom* found = st.rooms.find(msg.room);
  if (!found) return;
  PrefillRoom& r = *found;
  if (!r.encoder.empty() && r.encoder != env.sender) return;
  r.embed = Embed::none;  // its write is over: nothing lands under the grant any more
  if (r.embed_fence != 0 && st.ctx.engine->revoke_writes(r.embed_fence)) r.embed_fence = 0;
  r.encode_us = msg.encode_us;
  if (!msg.ok)
    return fail_room(st, msg.room,
                     make_error(msg.code == ErrorCode::ok ? ErrorCode::transfer_failed : msg.code,
                                "encoder '" + env.sender + "': " + msg.reason));
  if (r.state.terminal()) return maybe_reap(st, msg.room);
  r.embed = Embed::ready;
  if (r.embed_hash && r.landing)
    st.cache->insert(*r.embed_hash, {st.embed_base + uint64_t(*r.landing) * st.slot_bytes, r.embed_bytes},
                     uint32_t(r.embed_bytes / (uint64_t(st.ctx.model.d_model) * sizeof(float))));
  maybe_start(st, msg.room);
}

void on_abort(PrefillState& st, const Envelope& env, protocol::Abort& msg) {
  PrefillRoom* r = st.rooms.find(msg.room);
  if (!r) {
    st.bridge().send(env.sender, protocol::AbortAck{msg.room});
    return;
  }
  r->news = DecodeNews::abort_ack;  // answer this ABORT with an ACK once idle
  if (r->state.terminal()) {
    r->decode = env.sender;
    return maybe_reap(st, msg.room);
  }
  fail_room(st, msg.room, make_error(msg.code, "aborted by '" + env.sender + "': " + msg.reason),
            Notify{.router = false});
}

// A live room fails (counted): compute stops before its next chunk, every page and slot is freed once no
// write of it is in flight.
void on_cancel(PrefillState& st, const Envelope&, protocol::Cancel& msg) {
  const PrefillRoom* r = st.rooms.find(msg.room);
  if (!r || r->state.terminal()) return;
  ++st.ctx.load->cancelled_rooms;
  fail_room(st, msg.room, make_error(ErrorCode::aborted, "cancelled: " + msg.reason),
            Notify{.router = false});
}

void on_deadline(PrefillState& st) {
  st.deadline.fired();
  const auto now = kernel::DeadlineTimer::now(st.self);
  for (uint64_t id : st.rooms.ids_where([&](uint64_t, const PrefillRoom& r) {
         return r.waits_for_inputs() && r.created + st.settings.bootstrap_timeout <= now;
       })) {
    const PrefillRoom* r = st.rooms.find(id);
    if (!r || !r->waits_for_inputs()) continue;
    const char* missing = !r->have_bootstrap ? "BOOTSTRAP" : !r->have_submit ? "SUBMIT" : "embeddings";
    fail_room(
        st, id,
        make_error(r->have_bootstrap ? ErrorCode::waiting_timeout : ErrorCode::bootstrap_timeout,
                   std::string(missing) + " for room " + std::to_string(id) + " did not arrive within " +
                       std::to_string(st.settings.bootstrap_timeout.count()) + " ms"));
  }
  arm_timeout(st);
}

void on_peer_changes(PrefillState& st, const PeerChanges& pc) {
  for (const auto& c : pc.changes) {
    // A new incarnation of an encoder (restarted, or rejoined after it drained) proves the old one writes
    // no landing slot any more.
    if (c.new_incarnation != 0) {
      auto freed = st.rooms.ids_where([&](uint64_t, const PrefillRoom& r) {
        return r.embed == Embed::writing && r.encoder == c.id && r.encoder_inc != c.new_incarnation &&
               r.state.terminal();
      });
      for (uint64_t id : freed) {
        st.rooms.find(id)->embed = Embed::none;
        maybe_reap(st, id);
      }
    }
    if (c.old_incarnation == 0) continue;
    st.staging.erase(c.id);  // a restarted decode starts a fresh ring
    st.workers.forget_peer(st.self, c.id);
    for (uint64_t id : kernel::sharing_lost_peer(st.rooms, c)) {
      PrefillRoom& r = *st.rooms.find(id);
      // A new incarnation proves the old one writes nothing any more; a dead connection does not.
      if (r.encoder == c.id && r.embed == Embed::writing) {
        if (c.new_incarnation != 0)
          r.embed = Embed::none;
        else
          stop_waiting_for_embeddings(st, r);
      }
      if (r.decode == c.id) r.news = DecodeNews::none;  // nobody to tell
      fail_room(st, id, kernel::peer_lost_error(c));
    }
  }
}

// The rooms the worker held. Its sessions were closed before it went, so nothing of theirs still reads our
// pages. A room the crash cut short (WorkerCrashed::hit: its job threw, or its write was running) fails now
// (decode and router are told at once) and frees all. A room whose jobs the dead worker never started —
// queued behind the one that threw, or sent before we heard of the crash — or whose bytes had all landed
// was not hit: its jobs go again to the replacement (or another live worker), so the crash costs it no
// attempt and it is not failed with a cause that is not its own.
void on_worker_crashed(PrefillState& st, const WorkerCrashed& wc) {
  st.workers.crashed(wc);
  auto held = st.rooms.ids_where(
      [&](uint64_t, const PrefillRoom& r) { return r.worker == wc.index && !r.outstanding.empty(); });
  auto was_hit = [&](uint64_t id) {
    return !wc.hit || std::find(wc.hit->begin(), wc.hit->end(), id) != wc.hit->end();
  };
  const auto hit = std::count_if(held.begin(), held.end(), was_hit);
  spdlog::warn("prefill: transfer worker {} crashed holding {} room(s), {} of them cut short: {}", wc.index,
               held.size(), hit, wc.cause);
  for (uint64_t id : held) {
    PrefillRoom& r = *st.rooms.find(id);
    auto worker = st.workers.live(r.worker);
    if (!r.state.terminal() && !was_hit(id) && worker) {
      r.worker = *worker;
      spdlog::info(
          "prefill: {}: {} write(s) sent again to transfer worker {} (the crash did not cut them "
          "short)",
          kernel::room_tag(id, r.request_id()), r.outstanding.size(), r.worker);
      for (const auto& [_, job] : r.outstanding) st.self->send(st.workers.at(r.worker), job);
      continue;
    }
    r.outstanding.clear();
    publish_load(st);
    if (r.state.terminal())
      maybe_reap(st, id);
    else if (!was_hit(id))
      fail_room(st, id,
                make_error(ErrorCode::worker_crashed, "no transfer worker is alive (restart budget spent)"));
    else
      fail_room(st, id, make_error(ErrorCode::worker_crashed, "transfer worker crashed: " + wc.cause));
  }
}

// A failed room's encoder has not said EMBED_DONE within bootstrap_timeout.
void on_give_up(PrefillState& st, uint64_t id) {
  PrefillRoom* r = st.rooms.find(id);
  if (!r || r->embed != Embed::writing) return;
  stop_waiting_for_embeddings(st, *r);
  if (r->embed == Embed::writing) {
    // Ask the encoder: it answers EMBED_DONE once it holds no write of the room (at once if it does not
    // know the room any more, e.g. after either side rejoined).
    const auto& encoder = r->encoder;
    if (!encoder.empty() && st.bridge().peers().alive(encoder))
      st.bridge().send(encoder, protocol::EmbedPull{id, 0, 0, ErrorCode::aborted,
                                                    "room ended at prefill; confirm no write is in flight"});
    spdlog::warn(
        "prefill: {}: no EMBED_DONE from '{}' within {} ms after it failed; holding its landing slot "
        "while the encoder could still write it (shm)",
        kernel::room_tag(id, r->request_id()), encoder, st.settings.bootstrap_timeout.count());
    st.self->delayed_send(st.self, st.settings.bootstrap_timeout, giveup_atom::value, id);
    return;
  }
  spdlog::warn("prefill: {}: no EMBED_DONE from '{}' within {} ms after it failed; freeing its slot",
               kernel::room_tag(id, r->request_id()), r->encoder, st.settings.bootstrap_timeout.count());
  maybe_reap(st, id);
}

using Table = kernel::MessageTable<PrefillState>;

caf::behavior prefill_role(caf::stateful_actor<PrefillState>* self, RoleContext ctx,
                           kernel::TablePtr<PrefillState> table, PrefillSettings settings) {
  auto& st = kernel::start(self, std::move(ctx));
  st.ctx.load->room_phases.declare({"gathering", "computing", "computed", "aux_sent", "failed"});
  st.settings = settings;
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
  st.cache = std::make_unique<EmbeddingCache>(settings.embedding_cache_bytes);
  export_embedding_cache(*st.ctx.metrics, st.cache->stats());
  st.passes = &st.ctx.metrics->counter("epd_prefill_passes_total", "Prefill compute passes").Add({});
  st.pass_chunks =
      &st.ctx.metrics->counter("epd_prefill_pass_chunks_total", "Prompt chunks computed by prefill's passes")
           .Add({});
  st.prefix = std::make_unique<PrefixCache>(settings.prefix_cache_pages);
  export_prefix_cache(*st.ctx.metrics, st.prefix->stats());
  SupervisorConfig sc = settings.transfer;
  sc.name = "prefill-transfer";
  sc.workers = settings.transfer_workers;
  st.workers.start(self, st.ctx, sc);
  st.compute =
      spawn_prefill_compute(*st.ctx.system, st.ctx.detached_workers, st.ctx.model,
                            model::KvPool{reinterpret_cast<std::byte*>(kv->base), st.layout},
                            caf::actor_cast<caf::actor>(self), settings.batch_tokens, settings.chunk_delay);
  self->link_to(st.compute);
  publish_load(st);
  return kernel::role_behavior(
      self, table,
      {
          [=](ChunkComputed& c) { on_chunk(self->state, c); },
          [=](HeldReport& held) { self->state.bridge().send(held.to, std::move(held.body)); },
          [=](TransferDone& d) { on_transfer_done(self->state, d); },
          [=](stage_timeout_atom, uint64_t id, uint32_t chunk) { on_stage_timeout(self->state, id, chunk); },
          [=](timeout_atom) { on_deadline(self->state); },
          [=](PeerChanges& pc) { on_peer_changes(self->state, pc); },
          [=](WorkerCrashed& wc) { on_worker_crashed(self->state, wc); },
          [=](WorkerRestored& wr) { self->state.workers.restored(wr); },
          [=](giveup_atom, uint64_t id) { on_give_up(self->state, id); },
      });
}

protocol::Result<RoleHandle> spawn_prefill(RoleContext& ctx, PrefillSettings s) {
  auto budget = prefix_cache_budget(s.prefix_cache_pages, s.kv_pages, "prefill");
  if (!budget) return budget.error();
  s.prefix_cache_pages = *budget;
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
      "prefill: local KV pool of {} pages ({}), up to {} of them kept by the prefix cache, {} embedding "
      "slots of {} KiB, chunks of {} tokens, up to {} tokens a pass, {} transfer workers, {} staging buffers "
      "of {} KiB",
      s.kv_pages, describe_layout(layout), s.prefix_cache_pages, s.embed_slots, slot_bytes >> 10,
      s.chunk_tokens, s.batch_tokens, s.transfer_workers, s.staging_slots, stage_slot_bytes >> 10);
  auto table = std::make_shared<Table>();
  table->on<protocol::Submit>(on_submit)
      .on<protocol::Bootstrap>(on_bootstrap)
      .on<protocol::EmbedMeta>(on_embed_meta)
      .on<protocol::EmbedDone>(on_embed_done)
      .on<protocol::Abort>(on_abort)
      .on<protocol::Cancel>(on_cancel)
      .on<protocol::StagingRsp>(on_staging_rsp)
      .on<protocol::Watermark>(on_watermark);
  auto main = kernel::spawn_main(ctx, prefill_role, kernel::TablePtr<PrefillState>(table), s);
  if (!main) return main.error();
  return RoleHandle{*main, layout, s.kv_pages, {}, {}, {}};
}

}  // namespace epd::actors::prefill

namespace epd::actors {

RoleSpec prefill_role_spec() {
  using prefill::PrefillSettings;
  kernel::SettingsSchema<PrefillSettings> settings;
  settings.u32("kv_pages", &PrefillSettings::kv_pages, 1, kMaxKvPages)
      .u32("chunk_tokens", &PrefillSettings::chunk_tokens, 1, 1u << 20)
      .u32("batch_tokens", &PrefillSettings::batch_tokens, 1, 1u << 20)
      .u32("transfer_workers", &PrefillSettings::transfer_workers, 1, 64)
      .u32("embed_slots", &PrefillSettings::embed_slots, 1, 1u << 16)
      .u32("aux_slots", &PrefillSettings::aux_slots, 1, 1u << 20)
      .u32("staging_slots", &PrefillSettings::staging_slots, 1, 1024)
      .ms("bootstrap_timeout_ms", &PrefillSettings::bootstrap_timeout)
      .ms("staging_wait_timeout_ms", &PrefillSettings::staging_wait_timeout)
      .ms("report_delay_ms", &PrefillSettings::report_delay)
      .ms("chunk_delay_ms", &PrefillSettings::chunk_delay)
      .u64("embedding_cache_bytes", &PrefillSettings::embedding_cache_bytes, 0, uint64_t{1} << 40)
      .u32("prefix_cache_pages", &PrefillSettings::prefix_cache_pages, 0, 1u << 24)
      .part(&PrefillSettings::transfer, kernel::transfer_settings());
  kernel::kv_layout_settings(settings, &PrefillSettings::layout, &PrefillSettings::kv_pages);
  RoleSpec spec =
      kernel::make_role_spec("prefill", "runs chunked prefill and writes KV pages into decode's pool", true,
                             std::move(settings), prefill::spawn_prefill);
  spec.runs_model = true;
  return spec;
}

}  // namespace epd::actors
