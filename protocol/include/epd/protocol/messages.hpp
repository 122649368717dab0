#pragma once
// Every control-plane message. Names are the contract between the roles; docs/protocol.md gives each field.
// `fields()` lists the wire keys once, for encoding and decoding alike: `req` keys must be present,
// `opt` keys keep their default when absent. Unknown keys are ignored (forward compatibility).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "epd/protocol/errors.hpp"
#include "epd/protocol/kv_layout.hpp"
#include "epd/protocol/segment.hpp"

namespace epd::protocol {

enum class MessageType : uint16_t {
  // membership
  hello = 1,
  hello_ack = 2,
  peers = 3,
  heartbeat = 4,
  goodbye = 5,
  records = 6,
  // KV (decode <-> prefill)
  bootstrap = 16,
  kv_status = 17,
  chunk_ready = 18,
  abort = 19,
  abort_ack = 20,
  // staging (heterogeneous layouts)
  staging_req = 32,
  staging_rsp = 33,
  watermark = 34,
  // embeddings (encoder <-> prefill)
  embed_meta = 48,
  embed_pull = 49,
  embed_done = 50,
  // requests (router <-> roles)
  submit = 64,
  tokens = 65,
  result = 66,
  cancel = 67,
  // replies to bad input
  error = 96,
};

// Room state as in sglang's KVPoll; only moves forward, Failed overrides.
enum class KvState : uint8_t {
  bootstrapping = 0,
  waiting_for_input = 1,
  transferring = 2,
  success = 3,
  failed = 4
};
constexpr bool wire_enum_valid(KvState, uint64_t raw) {
  return raw <= 4;
}

enum class StagingStatus : uint8_t { ok = 0, oversized = 1, rejected = 2 };
constexpr bool wire_enum_valid(StagingStatus, uint64_t raw) {
  return raw <= 2;
}

// ---- membership -------------------------------------------------------------------------------------------

// Nested in LoadReport: the staging figures an instance reports in its heartbeats (decode: its ring; prefill:
// what it staged; docs/staging.md).
struct StagingStats {
  uint64_t ring_bytes = 0;         // decode: ring size
  uint64_t ring_used = 0;          // decode: bytes handed out and not yet consumed
  uint64_t ring_peak = 0;          // decode: highest ring_used since the previous heartbeat
  uint64_t rounds = 0;             // decode: times the ring wrapped
  uint64_t chunks = 0;             // chunks staged (prefill: written; decode: scattered)
  uint64_t waits = 0;              // prefill: chunks that had to wait for the watermark
  uint64_t watermarks = 0;         // WATERMARK messages sent (decode) / accepted (prefill)
  uint64_t rejected = 0;           // staging messages refused as garbage or out of order
  uint64_t oversized = 0;          // chunks refused because they can never fit
  uint64_t source_slots = 0;       // prefill: buffers for chunks being written
  uint64_t source_slots_free = 0;  // prefill: of which free

  bool operator==(const StagingStats&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.opt("ring_bytes", s.ring_bytes);
    v.opt("ring_used", s.ring_used);
    v.opt("ring_peak", s.ring_peak);
    v.opt("rounds", s.rounds);
    v.opt("chunks", s.chunks);
    v.opt("waits", s.waits);
    v.opt("watermarks", s.watermarks);
    v.opt("rejected", s.rejected);
    v.opt("oversized", s.oversized);
    v.opt("source_slots", s.source_slots);
    v.opt("source_slots_free", s.source_slots_free);
  }
};

// Nested in HEARTBEAT: an instance's load and failure counters (`/v1/instances` shows the same
// keys, docs/http-api.md).
//
// The figures are declared once over a `Slot` wrapper: LoadReport holds plain values (the wire form),
// actors::LoadGauge the same list as std::atomic slots that roles and transfer workers write from their own
// threads. A new figure is one member and one fields() line; /v1/instances renders it from fields().
template <template <class> class Slot, class Staging>
struct BasicLoadReport {
  Slot<bool> healthy = true;
  Slot<bool> draining = false;  // stopping (SIGTERM): finishes the rooms it holds, takes no new placements
  Slot<uint32_t> free_kv_pages = 0;  // decode: pool pages; prefill: local compute pages
  Slot<uint32_t> total_kv_pages = 0;
  Slot<uint32_t> free_slots = 0;  // embedding slots (encoder: source, prefill: landing)
  Slot<uint32_t> total_slots = 0;
  Slot<uint32_t> active_rooms = 0;
  Slot<uint64_t> worker_restarts = 0;    // transfer workers restarted after a crash, since start
  Slot<uint64_t> transfer_retries = 0;   // writes retried on a fresh session
  Slot<uint64_t> transfer_failures = 0;  // transfer jobs failed after the retry
  Slot<uint64_t> transfer_bytes = 0;     // bytes this instance's transfer jobs delivered, since start
  Slot<uint64_t> sessions_recycled = 0;  // sessions closed for a high failure rate
  Slot<uint32_t> quarantined_pages = 0;  // pages of aborted rooms held until their writer certainly stopped
  Slot<uint64_t> fenced_writes = 0;      // writes refused because their grant was revoked (stale writers)
  Slot<uint64_t> cancelled_rooms = 0;    // live rooms ended by the router's CANCEL, since start
  Slot<uint32_t> cached_kv_pages = 0;    // KV pages the prefix cache holds (prefill, decode; docs/caches.md)
  Slot<uint64_t> prefix_hit_tokens = 0;  // prompt tokens found in the prefix cache, since start
  Slot<uint64_t> prefix_missed_tokens = 0;  // prompt tokens looked up there and not found, since start
  Staging staging{};                        // instances that stage (docs/staging.md)

  bool operator==(const BasicLoadReport&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.opt("healthy", s.healthy);
    v.opt("draining", s.draining);
    v.opt("free_kv_pages", s.free_kv_pages);
    v.opt("total_kv_pages", s.total_kv_pages);
    v.opt("free_slots", s.free_slots);
    v.opt("total_slots", s.total_slots);
    v.opt("active_rooms", s.active_rooms);
    v.opt("worker_restarts", s.worker_restarts);
    v.opt("transfer_retries", s.transfer_retries);
    v.opt("transfer_failures", s.transfer_failures);
    v.opt("transfer_bytes", s.transfer_bytes);
    v.opt("sessions_recycled", s.sessions_recycled);
    v.opt("quarantined_pages", s.quarantined_pages);
    v.opt("fenced_writes", s.fenced_writes);
    v.opt("cancelled_rooms", s.cancelled_rooms);
    v.opt("cached_kv_pages", s.cached_kv_pages);
    v.opt("prefix_hit_tokens", s.prefix_hit_tokens);
    v.opt("prefix_missed_tokens", s.prefix_missed_tokens);
    v.opt("staging", s.staging);
  }
};

template <class T>
using PlainSlot = T;
using LoadReport = BasicLoadReport<PlainSlot, std::optional<StagingStats>>;

// Nested in HELLO, HELLO_ACK and PeerInfo: what two instances must agree on before they share a room
// (docs/protocol.md, "Compatibility"). A build speaks every protocol revision in oldest..current; two builds
// work together when their ranges overlap and they serve the same model. Absent (a build before revision 4,
// which never said): revision 0, refused.
struct BuildIdentity {
  uint32_t protocol = 0;         // newest revision this build speaks
  uint32_t protocol_oldest = 0;  // oldest revision it still speaks
  std::string build;             // which build, for people ("g6aec605"); never compared
  std::string model_name;        // the model's own name (GGUF general.name, the preset, ...)
  std::string model_digest;      // SHA-256 of the model files (of the config for a seeded model), hex

  bool operator==(const BuildIdentity&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.opt("protocol", s.protocol);
    v.opt("protocol_oldest", s.protocol_oldest);
    v.opt("build", s.build);
    v.opt("model_name", s.model_name);
    v.opt("model_digest", s.model_digest);
  }
};

// The role of the instances that place requests and keep the membership (the embedded registry, or etcd's
// watchers with etcd_watch = "routers"): membership and liveness treat them apart.
inline constexpr std::string_view kRouterRole = "router";

// Nested in PEERS: one member's descriptor. No load: figures that change every heartbeat stay between the
// instance and the registry (the router that places requests), so membership traffic grows with changes only.
struct PeerInfo {
  std::string instance_id;
  std::string role;
  std::string control_endpoint;
  uint64_t incarnation = 0;
  std::optional<SegmentDescriptor> segment;
  std::optional<KvLayout> kv_layout;
  BuildIdentity identity;

  bool operator==(const PeerInfo&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("instance_id", s.instance_id);
    v.req("role", s.role);
    v.req("control_endpoint", s.control_endpoint);
    v.req("incarnation", s.incarnation);
    v.opt("segment", s.segment);
    v.opt("kv_layout", s.kv_layout);
    v.opt("identity", s.identity);
  }
};

// Any instance → registry (the router by default), at start and after a restart. Carries the instance's
// transfer segment and, for prefill/decode, its KV layout.
struct Hello {
  static constexpr MessageType kType = MessageType::hello;
  static constexpr std::string_view kName = "HELLO";
  std::string role;
  std::string control_endpoint;
  std::optional<SegmentDescriptor> segment;
  std::optional<KvLayout> kv_layout;
  uint32_t kv_pages_total = 0;
  BuildIdentity identity;

  bool operator==(const Hello&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("role", s.role);
    v.req("control_endpoint", s.control_endpoint);
    v.opt("segment", s.segment);
    v.opt("kv_layout", s.kv_layout);
    v.opt("kv_pages_total", s.kv_pages_total);
    v.opt("identity", s.identity);
  }
};

// Registry → instance, in reply to HELLO. `accepted=false` with a reason when the instance is incompatible
// (another protocol range or model). `identity` is the registry's own: the instance checks it in turn.
struct HelloAck {
  static constexpr MessageType kType = MessageType::hello_ack;
  static constexpr std::string_view kName = "HELLO_ACK";
  bool accepted = false;
  std::string reason;
  uint32_t heartbeat_interval_ms = 0;
  BuildIdentity identity;

  bool operator==(const HelloAck&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("accepted", s.accepted);
    v.opt("reason", s.reason);
    v.opt("heartbeat_interval_ms", s.heartbeat_interval_ms);
    v.opt("identity", s.identity);
  }
};

// Registry → members. A full list (`full`) to an instance that said HELLO or reported a gap; to everyone
// else, after each change, a delta: the members that joined or restarted and the ids that left. A delta of
// `version` applies only on top of `version - 1`; a member that finds a gap asks for the full list in its
// next HEARTBEAT (`resync`), and one whose HEARTBEATs hold an older version for long gets it anyway
// (`peers_version`). So a change costs O(members) small messages, not O(members²) bytes.
struct Peers {
  static constexpr MessageType kType = MessageType::peers;
  static constexpr std::string_view kName = "PEERS";
  uint64_t version = 0;
  std::vector<PeerInfo> peers;    // full: every member; delta: members that joined or restarted
  bool full = true;               // false: a delta on top of version - 1
  std::vector<std::string> left;  // delta: ids of members that left

  bool operator==(const Peers&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("version", s.version);
    v.req("peers", s.peers);
    v.opt("full", s.full);
    v.opt("left", s.left);
  }
};

// Nested in RECORDS: one instance record etcd put (info set) or deleted (info absent) at `revision` (etcd's
// mod_revision of the key).
struct RecordChange {
  std::string id;
  uint64_t revision = 0;
  std::optional<PeerInfo> info;

  bool operator==(const RecordChange&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("id", s.id);
    v.req("revision", s.revision);
    v.opt("info", s.info);
  }
};

// Router → instance, with registry = "etcd" and etcd_watch = "routers": the instance records as the router's
// etcd watch saw them, so instances need no watch of their own. Each instance has one router that sends them,
// chosen by a hash of its id among the routers that serve. Full: every record at `revision` (to a new
// instance, or from another router if it stays silent; after the router listed etcd again; on a heartbeat's
// resync). Delta: the events in (since, revision], in etcd's order (from an earlier `since` to instances that
// a router took over from one that stopped serving). A receiver applies what is newer than what it has,
// whoever sent it, and asks that router for a full list when it is still short of what the router sent (a
// delta that started after it, or the router's HEARTBEAT) at the router's next heartbeat.
struct Records {
  static constexpr MessageType kType = MessageType::records;
  static constexpr std::string_view kName = "RECORDS";
  uint64_t revision = 0;
  bool full = true;
  uint64_t since = 0;  // delta: the revision it follows
  std::vector<RecordChange> changes;

  bool operator==(const Records&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("revision", s.revision);
    v.opt("full", s.full);
    v.opt("since", s.since);
    v.req("changes", s.changes);
  }
};

// Instance → registry, every heartbeat interval; carries its `LoadReport` so the router can pick the least
// loaded instance, and the PEERS version it holds: an instance that finds a gap asks for the full list
// (`resync`), and a registry that sees it hold one older version for long sends it anyway (a delta lost with
// no later one to show the gap). Router → instance with etcd_watch = "routers": an instance that holds less
// than the router's `records_revision` lost the last RECORDS and asks that router for the full list. Router →
// router: how far its RECORDS went, where another starts if it takes that router's instances over.
struct Heartbeat {
  static constexpr MessageType kType = MessageType::heartbeat;
  static constexpr std::string_view kName = "HEARTBEAT";
  uint64_t seq = 0;
  LoadReport load{};              // the sender's figures now
  bool resync = false;            // its PEERS version (RECORDS revision) has a gap: send the full list
  uint64_t records_revision = 0;  // a router's: its RECORDS sent so far; 0: none, or not this instance's
  uint64_t peers_version = 0;     // an instance's, to the registry: the PEERS version it holds; 0: none

  bool operator==(const Heartbeat&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("seq", s.seq);
    v.opt("load", s.load);
    v.opt("resync", s.resync);
    v.opt("records_revision", s.records_revision);
    v.opt("peers_version", s.peers_version);
  }
};

// Instance → registry and peers on clean shutdown, so rooms fail at once instead of after missed heartbeats.
struct Goodbye {
  static constexpr MessageType kType = MessageType::goodbye;
  static constexpr std::string_view kName = "GOODBYE";
  std::string reason;

  bool operator==(const Goodbye&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.opt("reason", s.reason);
  }
};

// Nested in KV_STATUS, TOKENS and RESULT: the log-probabilities of consecutive generated tokens (OpenAI's
// logprobs, docs/model.md "Log probabilities"), flattened so a token costs no map: `chosen[i]` is token i's,
// and its `top` most likely alternatives are [i * top, (i + 1) * top) of `top_ids` and `top_values`. The
// messages hold it as an optional key, absent when the room asked for none (so they cost nothing then).
// logprobs_fit() says whether it describes a given number of tokens.
struct Logprobs {
  std::vector<float> chosen{};
  uint32_t top = 0;
  std::vector<uint32_t> top_ids{};
  std::vector<float> top_values{};

  bool operator==(const Logprobs&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.opt("chosen", s.chosen);
    v.opt("top", s.top);
    v.opt("top_ids", s.top_ids);
    v.opt("top_values", s.top_values);
  }
};

// `l` holds one entry per token of `tokens` tokens, each with `l.top` alternatives (at most `max_top`).
bool logprobs_fit(const Logprobs& l, size_t tokens, uint32_t max_top);

// ---- KV ---------------------------------------------------------------------------------------------------

// Decode → prefill: decode's pre-allocation for a room (destination pages in token order, the aux slot, how
// many chunks to expect).
struct Bootstrap {
  static constexpr MessageType kType = MessageType::bootstrap;
  static constexpr std::string_view kName = "BOOTSTRAP";
  uint64_t room = 0;
  std::vector<uint32_t> dst_pages;  // decode pool page indices, in token order
  uint32_t aux_slot = 0;
  uint32_t expected_chunks = 0;
  uint32_t prompt_len = 0;
  uint64_t fence = 0;  // decode's write grant for these pages and the aux slot; every KV/aux write carries it
  // Whole pages, or any number where a page can be written from a token on (token-major pages, staged).
  uint32_t held_tokens = 0;  // leading prompt tokens decode holds (its prefix cache): not written

  bool operator==(const Bootstrap&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("room", s.room);
    v.req("dst_pages", s.dst_pages);
    v.req("aux_slot", s.aux_slot);
    v.opt("expected_chunks", s.expected_chunks);
    v.opt("prompt_len", s.prompt_len);
    v.opt("fence", s.fence);
    v.opt("held_tokens", s.held_tokens);
  }
};

// Prefill → decode: `success` after the last chunk and the aux record are in decode's memory; `failed` with
// code and reason at once on any failure. Also decode → prefill to fail a room early.
struct KvStatus {
  static constexpr MessageType kType = MessageType::kv_status;
  static constexpr std::string_view kName = "KV_STATUS";
  uint64_t room = 0;
  KvState state = KvState::bootstrapping;
  ErrorCode code = ErrorCode::ok;
  std::string reason;
  uint64_t encode_us = 0;  // stage times of the room so far, for the router's report
  uint64_t prefill_us = 0;
  uint64_t transfer_us = 0;
  // The first token travels in the aux record, its log-probabilities (too large for it) here; decode streams
  // them with it.
  std::optional<Logprobs>
      first_logprobs{};  // with `success`, when SUBMIT asked for logprobs: the first token's
  // (The whole chunks of prefill's grid; all tokens for an exact model: docs/caches.md, "Exactness".)
  uint32_t shareable_tokens = 0;  // with `success`: prompt tokens any prompt computes alike

  bool operator==(const KvStatus&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("room", s.room);
    v.req("state", s.state);
    v.opt("code", s.code);
    v.opt("reason", s.reason);
    v.opt("encode_us", s.encode_us);
    v.opt("prefill_us", s.prefill_us);
    v.opt("transfer_us", s.transfer_us);
    v.opt("first_logprobs", s.first_logprobs);
    v.opt("shareable_tokens", s.shareable_tokens);
  }
};

// Prefill → decode: one chunk is in place (staged path: in the staging ring at `offset`/`round`).
struct ChunkReady {
  static constexpr MessageType kType = MessageType::chunk_ready;
  static constexpr std::string_view kName = "CHUNK_READY";
  uint64_t room = 0;
  uint32_t chunk = 0;
  uint64_t offset = 0;  // staging ring offset (staged path)
  uint64_t bytes = 0;
  uint64_t round = 0;
  uint32_t first_token = 0;  // prompt position of the chunk's first token
  uint32_t tokens = 0;
  bool last = false;
  uint64_t checksum = 0;  // XXH3-64 of the staged bytes: decode verifies it before the scatter

  bool operator==(const ChunkReady&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("room", s.room);
    v.req("chunk", s.chunk);
    v.opt("offset", s.offset);
    v.opt("bytes", s.bytes);
    v.opt("round", s.round);
    v.opt("first_token", s.first_token);
    v.opt("tokens", s.tokens);
    v.opt("last", s.last);
    v.opt("checksum", s.checksum);
  }
};

// Either side → the other: stop working on the room; the receiver frees what it holds for it and answers
// ABORT_ACK.
struct Abort {
  static constexpr MessageType kType = MessageType::abort;
  static constexpr std::string_view kName = "ABORT";
  uint64_t room = 0;
  ErrorCode code = ErrorCode::aborted;
  std::string reason;

  bool operator==(const Abort&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("room", s.room);
    v.opt("code", s.code);
    v.opt("reason", s.reason);
  }
};

// Reply to ABORT: the sender will not touch the room's memory again.
struct AbortAck {
  static constexpr MessageType kType = MessageType::abort_ack;
  static constexpr std::string_view kName = "ABORT_ACK";
  uint64_t room = 0;

  bool operator==(const AbortAck&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("room", s.room);
  }
};

// ---- staging ----------------------------------------------------------------------------------------------

// Prefill → decode: asks for ring space for one chunk of a room whose layouts differ.
struct StagingReq {
  static constexpr MessageType kType = MessageType::staging_req;
  static constexpr std::string_view kName = "STAGING_REQ";
  uint64_t room = 0;
  uint32_t chunk = 0;
  uint64_t bytes = 0;

  bool operator==(const StagingReq&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("room", s.room);
    v.req("chunk", s.chunk);
    v.req("bytes", s.bytes);
  }
};

// Decode → prefill: where the chunk may go (`offset`, `round`) or `oversized` (can never fit: the room
// fails).
struct StagingRsp {
  static constexpr MessageType kType = MessageType::staging_rsp;
  static constexpr std::string_view kName = "STAGING_RSP";
  uint64_t room = 0;
  uint32_t chunk = 0;
  StagingStatus status = StagingStatus::ok;
  uint64_t offset = 0;
  uint64_t round = 0;
  std::string reason;

  bool operator==(const StagingRsp&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("room", s.room);
    v.req("chunk", s.chunk);
    v.req("status", s.status);
    v.opt("offset", s.offset);
    v.opt("round", s.round);
    v.opt("reason", s.reason);
  }
};

// Decode → writers: everything before (`round`, `tail`) has been scattered; that ring space may be reused.
struct Watermark {
  static constexpr MessageType kType = MessageType::watermark;
  static constexpr std::string_view kName = "WATERMARK";
  uint64_t round = 0;
  uint64_t tail = 0;

  bool operator==(const Watermark&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("round", s.round);
    v.req("tail", s.tail);
  }
};

// ---- embeddings -------------------------------------------------------------------------------------------

// Encoder → prefill: the room's embeddings are computed; their size, and the image's content hash so a
// prefill that still holds these embeddings can answer with a `cached` EMBED_PULL instead of a transfer.
struct EmbedMeta {
  static constexpr MessageType kType = MessageType::embed_meta;
  static constexpr std::string_view kName = "EMBED_META";
  uint64_t room = 0;
  uint32_t tokens = 0;  // embeddings (image patches)
  uint32_t dim = 0;
  uint64_t bytes = 0;
  DType dtype = DType::f32;
  std::vector<uint8_t> content_hash{};  // SHA-256 of the decoded pixels (32 bytes); empty: none, never cached

  bool operator==(const EmbedMeta&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("room", s.room);
    v.req("tokens", s.tokens);
    v.req("dim", s.dim);
    v.req("bytes", s.bytes);
    v.opt("dtype", s.dtype);
    v.opt("content_hash", s.content_hash);
  }
};

// Prefill → encoder: the landing address in prefill's segment where the encoder writes the embeddings (or a
// non-ok code when prefill cannot take them, or `cached`: prefill holds them already and no write is wanted).
struct EmbedPull {
  static constexpr MessageType kType = MessageType::embed_pull;
  static constexpr std::string_view kName = "EMBED_PULL";
  uint64_t room = 0;
  uint64_t addr = 0;
  uint64_t bytes = 0;
  ErrorCode code = ErrorCode::ok;  // non-ok: prefill cannot take the embeddings (e.g. out_of_capacity)
  std::string reason;
  uint64_t fence = 0;   // prefill's write grant for the landing slot; the embedding write carries it
  bool cached = false;  // prefill holds the embeddings of EMBED_META's content_hash: the room ends, no write

  bool operator==(const EmbedPull&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("room", s.room);
    v.req("addr", s.addr);
    v.req("bytes", s.bytes);
    v.opt("code", s.code);
    v.opt("reason", s.reason);
    v.opt("fence", s.fence);
    v.opt("cached", s.cached);
  }
};

// Encoder → prefill: the embeddings are in place (`ok`), or the write failed with code and reason.
struct EmbedDone {
  static constexpr MessageType kType = MessageType::embed_done;
  static constexpr std::string_view kName = "EMBED_DONE";
  uint64_t room = 0;
  bool ok = true;
  ErrorCode code = ErrorCode::ok;
  std::string reason;
  uint64_t encode_us = 0;

  bool operator==(const EmbedDone&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("room", s.room);
    v.req("ok", s.ok);
    v.opt("code", s.code);
    v.opt("reason", s.reason);
    v.opt("encode_us", s.encode_us);
  }
};

// ---- requests ---------------------------------------------------------------------------------------------

// A generation's grammar (docs/model.md, "Grammars"): GBNF in llama.cpp's dialect, run by libllama's grammar
// sampler. A lazy grammar constrains nothing until a trigger occurs in the answer (a pattern matching its
// text, or one of the tokens), then constrains it from the trigger on; a grammar that is not lazy takes the
// `prefill` tokens first (the generation prompt llama.cpp's tool-call grammars begin with).
struct GrammarSpec {
  std::string gbnf{};  // GBNF (llama.cpp's) the answer follows, <= 64 KiB; empty: none
  bool lazy = false;   // constrained only from a trigger on
  std::vector<std::string> trigger_patterns{};  // regular expressions (std::regex ECMAScript) over the text
  std::vector<uint32_t> trigger_tokens{};       // tokens that trigger it
  std::vector<uint32_t> prefill{};              // accepted before the answer's first token (not lazy only)
  bool empty() const { return gbnf.empty(); }
  bool operator==(const GrammarSpec&) const = default;
};

// Router → encoder, prefill and decode: a room's work. Each role reads the fields it needs. The sampling
// fields (temperature, top_p, top_k, seed) pick the generated tokens as model::SamplingParams does
// (docs/model.md, "Sampling"); their defaults are greedy, which is what a peer that omits them gets.
struct Submit {
  static constexpr MessageType kType = MessageType::submit;
  static constexpr std::string_view kName = "SUBMIT";
  uint64_t room = 0;
  uint32_t attempt = 0;
  std::vector<uint32_t> prompt;  // token ids, with image placeholders where embedding rows go
  // Media items in prompt order: binary PPMs (P6), and audio clips as WAVs of 32-bit float mono samples at
  // 16 kHz (an encoder that predates audio cannot load an audio mmproj, so never gets one); none = text
  // only. The encoder returns their rows concatenated.
  std::vector<std::vector<uint8_t>> images;
  uint32_t image_tokens = 0;  // image placeholders in the prompt: rows of all images
  uint32_t max_tokens = 0;
  std::string encoder;  // instance ids of the room's path
  std::string prefill;
  std::string decode;
  std::string request_id;  // the client-visible request id (X-Request-Id): every role logs it with the room
  float temperature = 0;   // 0 = greedy; else in (0, 2]
  float top_p = 1;         // in (0, 1]
  uint32_t top_k = 0;      // 0 = no limit
  float min_p = 0;         // tokens less likely than min_p x the most likely are not drawn; 0 = off
  std::vector<uint32_t> logit_bias_ids;  // tokens whose logits get logit_bias_values[i] added (OpenAI's)
  std::vector<float> logit_bias_values;  // as many as logit_bias_ids, each in [-100, 100]
  float presence_penalty = 0;            // in [-2, 2]: minus this for each token the answer so far has
  float frequency_penalty = 0;           // in [-2, 2]: minus this x the times the answer so far has the token
  float repetition_penalty = 1;  // in (0, 2], 1 = off: prompt and answer tokens' logit / it (x it if <= 0)
  uint64_t seed = 0;             // sampling seed; with the token's index the only randomness
  // A resumed answer (its decode handed the room over, or died): the prompt ends with the first
  // `resume_from` tokens drawn before, the first token drawn here has that index, and max_tokens counts the
  // rest. 0: a new answer.
  uint32_t resume_from = 0;
  // Decode's prefix cache keys the pages holding image rows with it (empty: no images, or not named). Every
  // member runs the same vision tower (the model digest covers it), so the pixels decide the rows.
  std::vector<uint8_t> images_key;  // SHA-256 of the request's images' pixels, in order (32 bytes)
  // Prefill reports the first token's log-probabilities in KV_STATUS, decode every token's in TOKENS and
  // RESULT. They never change the draw.
  bool logprobs = false;      // each generated token's log-probability
  uint32_t top_logprobs = 0;  // and this many most likely alternatives with theirs, 0..20 (with logprobs)
  // Constrained decoding (the router converts JSON schemas and checks the grammar); prefill and decode
  // rebuild its state from a resumed answer's tokens.
  GrammarSpec grammar{};    // its fields are grammar, grammar_lazy, grammar_triggers, ... below
  bool ignore_eos = false;  // the model's end tokens do not end the answer: max_tokens does (llama-server's)
  // A role waiting for work queued at another bounds the wait by it (docs/failure-handling.md, "Deadlines").
  uint32_t budget_ms = 0;  // the request's time left at the router when it sent this, ms; 0: not given
  // An M-RoPE model's images as grids of rows, where prefill and decode rotate them (docs/model.md,
  // "M-RoPE").
  std::vector<uint32_t> image_grids;  // per image in prompt order: columns, rows (cols x rows rows); or none

  bool operator==(const Submit&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("room", s.room);
    v.opt("attempt", s.attempt);
    v.opt("prompt", s.prompt);
    v.opt("images", s.images);
    v.opt("image_tokens", s.image_tokens);
    v.opt("max_tokens", s.max_tokens);
    v.opt("encoder", s.encoder);
    v.opt("prefill", s.prefill);
    v.opt("decode", s.decode);
    v.opt("request_id", s.request_id);
    v.opt("temperature", s.temperature);
    v.opt("top_p", s.top_p);
    v.opt("top_k", s.top_k);
    v.opt("min_p", s.min_p);
    v.opt("logit_bias_ids", s.logit_bias_ids);
    v.opt("logit_bias_values", s.logit_bias_values);
    v.opt("presence_penalty", s.presence_penalty);
    v.opt("frequency_penalty", s.frequency_penalty);
    v.opt("repetition_penalty", s.repetition_penalty);
    v.opt("seed", s.seed);
    v.opt("resume_from", s.resume_from);
    v.opt("images_key", s.images_key);
    v.opt("logprobs", s.logprobs);
    v.opt("top_logprobs", s.top_logprobs);
    v.opt("grammar", s.grammar.gbnf);
    v.opt("grammar_lazy", s.grammar.lazy);
    v.opt("grammar_triggers", s.grammar.trigger_patterns);
    v.opt("grammar_trigger_tokens", s.grammar.trigger_tokens);
    v.opt("grammar_prefill", s.grammar.prefill);
    v.opt("ignore_eos", s.ignore_eos);
    v.opt("budget_ms", s.budget_ms);
    v.opt("image_grids", s.image_grids);
  }
};

// Decode → router: generated tokens, streamed as they are produced.
struct Tokens {
  static constexpr MessageType kType = MessageType::tokens;
  static constexpr std::string_view kName = "TOKENS";
  uint64_t room = 0;
  uint32_t index = 0;  // position of tokens[0] in the generated sequence
  std::vector<uint32_t> tokens;
  std::optional<Logprobs> logprobs{};  // SUBMIT asked for them: one entry per token; else absent

  bool operator==(const Tokens&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("room", s.room);
    v.req("index", s.index);
    v.req("tokens", s.tokens);
    v.opt("logprobs", s.logprobs);
  }
};

// Role → router: the terminal report of a room (RESULT); `ok=false` carries the code and reason of the
// failure.
struct RoomResult {
  static constexpr MessageType kType = MessageType::result;
  static constexpr std::string_view kName = "RESULT";
  uint64_t room = 0;
  bool ok = false;
  ErrorCode code = ErrorCode::ok;
  std::string reason;
  std::vector<uint32_t> tokens;
  uint64_t encode_us = 0;
  uint64_t prefill_us = 0;
  uint64_t transfer_us = 0;
  uint64_t first_token_us = 0;
  uint64_t decode_us = 0;
  std::optional<Logprobs> logprobs{};  // SUBMIT asked for them: one entry per token of `tokens`; else absent

  bool operator==(const RoomResult&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("room", s.room);
    v.req("ok", s.ok);
    v.opt("code", s.code);
    v.opt("reason", s.reason);
    v.opt("tokens", s.tokens);
    v.opt("encode_us", s.encode_us);
    v.opt("prefill_us", s.prefill_us);
    v.opt("transfer_us", s.transfer_us);
    v.opt("first_token_us", s.first_token_us);
    v.opt("decode_us", s.decode_us);
    v.opt("logprobs", s.logprobs);
  }
};

// Router → roles: the client gave up or the router retries elsewhere; the roles abort the room.
struct Cancel {
  static constexpr MessageType kType = MessageType::cancel;
  static constexpr std::string_view kName = "CANCEL";
  uint64_t room = 0;
  std::string reason;

  bool operator==(const Cancel&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("room", s.room);
    v.opt("reason", s.reason);
  }
};

// Any → sender of a frame that could not be accepted (malformed, unexpected in the room's state, unknown
// room).
struct ErrorReply {
  static constexpr MessageType kType = MessageType::error;
  static constexpr std::string_view kName = "ERROR";
  ErrorCode code = ErrorCode::internal;
  std::string detail;
  uint16_t in_reply_to = 0;  // the offending message's type, 0 if unknown
  uint64_t room = 0;

  bool operator==(const ErrorReply&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("code", s.code);
    v.opt("detail", s.detail);
    v.opt("in_reply_to", s.in_reply_to);
    v.opt("room", s.room);
  }
};

using Body = std::variant<Hello, HelloAck, Peers, Records, Heartbeat, Goodbye, Bootstrap, KvStatus,
                          ChunkReady, Abort, AbortAck, StagingReq, StagingRsp, Watermark, EmbedMeta,
                          EmbedPull, EmbedDone, Submit, Tokens, RoomResult, Cancel, ErrorReply>;

MessageType type_of(const Body& body);
std::string_view type_name(MessageType type);
bool is_known_type(uint64_t raw);

}  // namespace epd::protocol
