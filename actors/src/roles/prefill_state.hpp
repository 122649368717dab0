#pragma once
// The prefill role's state, shared by its two halves: prefill_role.cpp (rooms, compute, the direct
// page-to-page path) and prefill_staging.cpp (the staged path for a decode with another KV layout).
#include <caf/all.hpp>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <set>

#include "cache/page_allocator.hpp"
#include "cache/staging_ring.hpp"
#include "epd/actors/cache/embedding_cache.hpp"
#include "epd/actors/cache/prefix_cache.hpp"
#include "epd/actors/kernel/role_kernel.hpp"
#include "epd/actors/kernel/transfer_workers.hpp"
#include "epd/actors/room.hpp"
#include "epd/metrics/registry.hpp"
#include "epd/model/sampling.hpp"

namespace epd::actors::prefill {

using clock = std::chrono::steady_clock;

struct PrefillSettings {
  uint32_t kv_pages = 512;
  uint32_t chunk_tokens = 64;
  uint32_t batch_tokens = 256;  // prompt tokens one compute pass takes, over rooms (chunks stay whole)
  uint32_t transfer_workers = 2;
  uint32_t embed_slots = 16;
  uint32_t aux_slots = 1024;
  uint32_t staging_slots = 4;  // source buffers for staged chunks being written
  std::chrono::milliseconds bootstrap_timeout{10000};
  std::chrono::milliseconds staging_wait_timeout{
      10000};                                 // a chunk waiting for ring space fails its room after
  std::chrono::milliseconds report_delay{0};  // fault injection: hold failure reports (router, decode)
  std::chrono::milliseconds chunk_delay{0};   // fault injection: a pause before every chunk (slow prefill)
  uint64_t embedding_cache_bytes = uint64_t{64} << 20;  // 0: every image's embeddings are transferred
  uint32_t prefix_cache_pages = kPrefixCacheDefault;    // local KV pages the prefix cache may keep; 0: off
  SupervisorConfig transfer;
  protocol::KvLayout layout;  // the local pool's (kv_page_size, kv_dtype, kv_order settings)
};

// One chunk on the staged path: computed, waiting for its grant, for the watermark, or being written.
struct StagedChunk {
  uint32_t first = 0;  // prompt position of its first token
  uint32_t tokens = 0;
  uint64_t bytes = 0;
  bool last = false;
  bool granted = false;
  protocol::StagingRsp grant;
  uint64_t position = 0;  // logical ring position of the grant
  bool waited = false;    // counted once in the staging gauge
  bool writing = false;
  std::optional<uint32_t> src_slot;
  uint64_t checksum = 0;
};

// A room's KV side: gathering (SUBMIT, BOOTSTRAP and embeddings) -> computing (chunks go out as they
// complete) -> computed (compute done; last writes in flight) -> aux_sent (the aux record is the last
// write; its completion is KV_STATUS Success). `state` says whether the room is still live or failed.
// epd_rooms{state} (docs/metrics.md) lists rooms by these names, in this order.
enum class Progress { gathering, computing, computed, aux_sent };
// The embeddings of an image prompt: none yet -> writing (EMBED_PULL sent: the encoder may write the
// landing slot until EMBED_DONE) -> ready. A failed room stays `writing` until the encoder can no longer
// write.
enum class Embed { none, writing, ready };
// What decode is owed when the room is reaped: KV_STATUS Failed, an ABORT_ACK (it asked to abort), or
// nothing (told already, or it is gone).
enum class DecodeNews { kv_status, abort_ack, none };

struct PrefillRoom {
  RoomState state;
  Progress progress = Progress::gathering;
  Embed embed = Embed::none;
  DecodeNews news = DecodeNews::kv_status;
  clock::time_point created = clock::now();
  std::string router;
  bool have_submit = false;
  bool told_started = false;  // decode heard that a chunk of it is computed (KV_STATUS transferring)
  protocol::Submit submit;
  model::PromptPositions positions;  // where its rows rotate (SUBMIT's image_grids, M-RoPE)
  bool have_bootstrap = false;
  protocol::Bootstrap boot;
  std::string decode;   // from SUBMIT, or BOOTSTRAP's sender until SUBMIT arrives
  std::string encoder;  // from SUBMIT, or EMBED_META's sender (the writer of the landing slot) before it
  // Incarnations of the peers this room is shared with (from their envelopes; 0 = not heard from yet).
  // Only the death of that incarnation fails the room.
  uint64_t decode_inc = 0, router_inc = 0, encoder_inc = 0;
  std::optional<uint32_t> landing;  // embedding slot
  uint64_t embed_bytes = 0;
  uint64_t embed_fence = 0;               // our write grant for the landing slot (EMBED_PULL's fence)
  std::optional<ContentHash> embed_hash;  // EMBED_META's: the landed embeddings are cached under it
  std::optional<protocol::SegmentDescriptor> encoder_segment;  // to tell whether its writes are fenced
  uint64_t encode_us = 0;
  // Local KV pages in prompt order: first the prefix cache's (`prefix`, read-only, referenced while the
  // room lives), then the room's own. After compute, the cache may take over own pages (the lease grows).
  std::vector<uint32_t> local_pages;
  PrefixCache::Lease prefix;
  std::vector<PageKey> page_keys;  // the prompt's full pages as the cache keys them
  uint32_t cached_tokens = 0;      // prompt tokens whose KV came from the cache (not computed)
  std::optional<uint32_t> aux_src;
  uint32_t pages_sent = 0;
  uint32_t shareable_tokens = 0;  // leading tokens whose K/V other prompts may be given (ChunkGrid)
  uint32_t held_in_page = 0;      // decode holds the first this many tokens of page pages_sent (held_tokens)
  uint32_t first_token = 0;
  model::TokenLogprobs first_logprobs{};  // first_token's, when SUBMIT asked for logprobs
  uint64_t prefill_us = 0;
  clock::time_point transfer_start;
  uint64_t transfer_us = 0;
  uint32_t worker = 0;  // index of the transfer worker its writes go through
  // The write jobs in flight, by tag: a worker that dies before it started one has its replacement sent
  // it again, and the room is not failed (WorkerCrashed::hit).
  std::map<uint64_t, TransferJob> outstanding;
  // Staged path (decode uses another KV layout).
  bool staged = false;
  uint32_t tokens_staged = 0;              // prompt tokens handed to chunks so far
  uint32_t chunks_made = 0;                // next chunk index
  std::map<uint32_t, StagedChunk> chunks;  // not yet written and announced

  // The client's request id for the logs (empty until SUBMIT arrives).
  std::string_view request_id() const { return submit.request_id; }
  bool computing() const { return progress == Progress::computing; }
  bool computed_all() const { return progress >= Progress::computed; }
  bool waits_for_inputs() const { return progress == Progress::gathering && !state.terminal(); }
  // The peers whose loss fails the room: decode, router, and the encoder until the embeddings are in.
  std::vector<kernel::SharedPeer> shared_peers() const {
    std::vector<kernel::SharedPeer> out{{decode, decode_inc}, {router, router_inc}};
    if (embed != Embed::ready) out.push_back({encoder, encoder_inc});
    return out;
  }
};

// What prefill knows of one decode's staging ring.
struct StagingTarget {
  uint64_t incarnation = 0;
  uint64_t base = 0;  // the ring's address in the decode's segment
  StagingWindow window{1};
};

struct PrefillState : kernel::RoleBase {
  PrefillSettings settings;
  protocol::KvLayout layout;
  uint64_t kv_base = 0;
  uint8_t* embed_base = nullptr;
  uint64_t slot_bytes = 0;
  uint8_t* aux_base = nullptr;
  uint8_t* stage_base = nullptr;  // source buffers of staged chunks
  uint64_t stage_slot_bytes = 0;
  PageAllocator pages{0}, slots{0}, aux{0}, stage_slots{0};
  // Tombstones: an encoder still working for an ended room is told the real cause, so the failure it
  // reports is the root one with its retryability.
  kernel::RoomTable<PrefillRoom> rooms{4096};
  std::map<std::string, StagingTarget> staging;  // by decode id
  kernel::TransferWorkers workers;
  caf::actor compute;
  // Compute passes, and the chunks they computed (over passes: how many rooms a pass batches).
  metrics::Counter* passes = nullptr;
  metrics::Counter* pass_chunks = nullptr;
  // Embeddings of recent images by content hash: a room whose image is here skips its E->P transfer.
  std::unique_ptr<EmbeddingCache> cache;
  // KV pages of prompts computed before: a room whose prompt starts with them computes only the rest.
  std::unique_ptr<PrefixCache> prefix;
  static inline const char* name = "prefill";
};

using stage_timeout_atom = caf::atom_constant<caf::atom("stagetime")>;

// prefill_role.cpp
struct Notify {
  bool router = true;  // RESULT failed (false: the router or decode ended the room itself)
};
void fail_room(PrefillState& st, uint64_t id, protocol::Error error, Notify notify = {});
void maybe_reap(PrefillState& st, uint64_t id);
bool dispatch(PrefillState& st, uint64_t id, PrefillRoom& r, TransferJob job);
void maybe_send_aux(PrefillState& st, uint64_t id, PrefillRoom& r);

// prefill_staging.cpp
// Hands tokens [r.tokens_staged, end) to new chunks of at most chunk_tokens and asks decode for ring space.
void stage_tokens(PrefillState& st, uint64_t id, PrefillRoom& r, uint32_t end, bool last);
void on_staging_rsp(PrefillState& st, const protocol::Envelope& env, protocol::StagingRsp& rsp);
void on_watermark(PrefillState& st, const protocol::Envelope& env, protocol::Watermark& w);
// A staged chunk's write ended: announce it (CHUNK_READY) or fail the room.
void on_staged_write_done(PrefillState& st, PrefillRoom& r, const TransferDone& d);
void on_stage_timeout(PrefillState& st, uint64_t id, uint32_t chunk);
// Frees the source buffers a room's chunks still hold (nothing reads them any more).
void release_stage_slots(PrefillState& st, PrefillRoom& r);
// Whether every chunk of the room is written and announced.
inline bool staged_all_done(const PrefillRoom& r) {
  return !r.staged || (r.computed_all() && r.chunks.empty());
}

}  // namespace epd::actors::prefill
