// The router role: the front door. It turns a generate call into a room (encoder for the image, prefill,
// decode — each picked by least load among healthy registered instances), sends the SUBMITs, streams TOKENS
// to the caller's sink as they arrive, and retries a failed room on other instances when the cause is
// retryable, up to max_attempts (a retry regenerates the same tokens: sampling is seeded per position, so
// only tokens beyond those already streamed are passed on). At most max_in_flight requests run; up to
// max_queued more wait in arrival order; beyond that the answer is 429, as it is at once for a request
// whose prompt would wait longer than max_queue_wait for its first token behind the prompts already
// accepted, at the rate they have been answered (PromptBacklog). Every call ends within
// request_timeout: with tokens, cancelled by the caller, or with an error naming the cause.
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <algorithm>
#include <deque>
#include <map>
#include <random>
#include <set>

#include "cache/prefix_index.hpp"
#include "epd/actors/cache/content_hash.hpp"
#include "epd/actors/kernel/role_kernel.hpp"
#include "epd/http/http_api.hpp"
#include "epd/http/router_service.hpp"
#include "epd/model/chat.hpp"
#include "epd/model/media.hpp"
#include "epd/model/mmproj.hpp"
#include "epd/model/prompt_codec.hpp"
#include "epd/model/tokens.hpp"
#include "roles/logprobs_wire.hpp"
#include "roles/placement_index.hpp"
#include "roles/prompt_backlog.hpp"
#include "roles/roles.hpp"
#include "roles/room_grammar.hpp"
#include "router_metrics.hpp"

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::http::GenerateRequest)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<epd::http::GenerationSink>)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::function<void(epd::http::RouterStats)>)

namespace epd::actors {
namespace {

using http::GenerateRequest;
using http::GenerateResponse;
using http::GenerationSink;
using SinkPtr = std::shared_ptr<GenerationSink>;
using http::HttpApi;
using http::HttpApiConfig;
using http::InstanceView;
using http::RouterService;
using http::RouterStats;
using clock = std::chrono::steady_clock;
using protocol::Envelope;
using protocol::ErrorCode;
using protocol::make_error;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using retry_atom = caf::atom_constant<caf::atom("retry")>;
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;
constexpr std::chrono::milliseconds kUnavailablePoll{100};
constexpr std::chrono::milliseconds kCapacityBackoff{20};

double ms_between(clock::time_point a, clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct Attempt {
  uint64_t room = 0;  // 0: no attempt running (waiting for an instance to come back)
  std::string encoder, prefill, decode;
  uint64_t encoder_inc = 0, prefill_inc = 0, decode_inc = 0;  // the incarnations it was placed on
  uint32_t resume_from = 0;  // tokens of the answer drawn before this attempt (its SUBMIT's resume_from)
  // Tokens of work charged to its prefill (uncached prompt, until the first token) and decode (prompt and
  // answer, until the attempt ends): cache-aware placement weighs them against cached prefixes.
  uint64_t prefill_work = 0, decode_work = 0;
  clock::time_point started;
  std::optional<clock::time_point> first_token;
};

struct Pending {
  SinkPtr sink;
  GenerateRequest request;
  bool queued = false;                             // waiting for an in-flight slot
  std::vector<uint32_t> streamed;                  // tokens passed to the sink so far (any attempt)
  std::vector<model::TokenLogprobs> logprobs;      // theirs, when the request asked (request.sampling)
  std::optional<clock::time_point> last_streamed;  // when tokens were last passed on (inter-token latency)
  std::vector<uint32_t> prompt;
  uint32_t image_tokens = 0;
  std::vector<uint64_t> blocks;       // the prompt's whole blocks for cache-aware placement (PrefixIndex)
  std::vector<uint8_t> images_key;    // SUBMIT's: the images' hash (empty: none)
  std::vector<uint32_t> image_grids;  // SUBMIT's: an M-RoPE model's image grids (empty: none)
  // Prompt tokens it counts in the router's backlog until its first token (the uncached part once placed).
  std::optional<uint64_t> backlog;
  uint32_t attempts = 0;
  uint32_t capacity_waits = 0;  // attempts refused for lack of room: they do not use up max_attempts
  Attempt current;
  clock::time_point started;
  // Failures of this request per instance: a retry goes to the instance that failed it least (then the
  // least loaded), so an instance that fails fast cannot take every attempt before its heartbeat says so.
  std::map<std::string, uint32_t> failed_instances;
  protocol::Error last_error;  // why the previous attempt failed (named if we give up)

  // The instances whose loss fails the current attempt (none while waiting for one to come back).
  std::vector<kernel::SharedPeer> shared_peers() const {
    if (current.room == 0) return {};
    // Decode streams an attempt's tokens only once all its KV arrived: encoder and prefill are done with
    // it then, and their leaving (a drained instance exiting) must not fail it.
    if (current.first_token) return {{current.decode, current.decode_inc}};
    return {{current.encoder, current.encoder_inc},
            {current.prefill, current.prefill_inc},
            {current.decode, current.decode_inc}};
  }
};

struct RouterSettings {
  std::string http_host = "127.0.0.1";
  uint16_t http_port = 8080;
  uint32_t max_tokens_limit = 1024;
  std::chrono::milliseconds unavailable_wait{5000};
  uint32_t max_in_flight = 256;  // requests placed on instances at once
  uint32_t max_queued = 1024;    // more wait here; beyond that 429
  // A request expected to wait longer for its first token is refused (429); none: half the request
  // timeout; 0: never refused for its wait.
  std::optional<std::chrono::milliseconds> max_queue_wait;
  std::chrono::milliseconds drain_timeout{4000};  // SIGTERM: how long requests in flight may finish
  uint32_t http_threads = 2;
  uint32_t http_max_connections = 10000;
  uint32_t prefix_index_blocks = 1u << 16;        // per instance; 0: least-loaded placement only
  std::shared_ptr<const http::ApiKeys> api_keys;  // api_keys_file, loaded; none: the API is open
  std::optional<http::TlsFiles> tls;              // tls_cert and tls_key; none: plain HTTP
};

struct RouterLimits {
  uint32_t max_in_flight = 256;
  uint32_t max_queued = 1024;
  std::chrono::milliseconds max_queue_wait{0};  // 0: off
  std::chrono::milliseconds unavailable_wait{5000};
  uint32_t prefix_index_blocks = 1u << 16;
};

// The served model's text codec, built once at start. A checkpoint without a tokenizer epd can run has
// none: it is served by token ids only, and `missing` says why text is refused.
struct RouterCodec {
  std::shared_ptr<const model::PromptCodec> codec;
  std::string missing;
};

struct RouterState : kernel::RoleBase {
  std::map<uint64_t, uint64_t> room_to_request;
  // By ticket. Tickets are handed out in arrival order (nearly: by several HTTP threads), so the first
  // entry is the next to time out.
  std::map<uint64_t, Pending> requests;
  std::deque<uint64_t> queue;  // tickets waiting for an in-flight slot, oldest first
  uint32_t active = 0;         // requests not queued
  PromptBacklog backlog;       // prompts accepted and not yet answered, and the rate they are answered at
  // The registry's instances with this router's rooms and tokens of work on each, ordered for placement.
  PlacementIndex placement;
  // What each prefill's and decode's prefix cache is believed to hold (cache-aware placement).
  std::unique_ptr<PrefixIndex> prefix_index;
  uint64_t next_request = 1;
  std::mt19937_64 rng{std::random_device{}()};
  RouterStats stats;
  std::unique_ptr<RouterMetrics> metrics;  // counted at the same points as `stats`
  RouterLimits limits;
  RouterCodec codec;
  std::unique_ptr<RoomGrammars> grammars;  // parses each request's grammar once, before its rooms
  static inline const char* name = "router";
};

int http_status_for(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_request:
      return 400;
    case ErrorCode::aborted:
      return 499;  // the client went away (nobody reads this answer)
    case ErrorCode::out_of_capacity:
    case ErrorCode::unknown_peer:
      return 503;
    case ErrorCode::timeout:
    case ErrorCode::waiting_timeout:
    case ErrorCode::bootstrap_timeout:
      return 504;
    default:
      return 502;
  }
}

// Placeable by this router now: its last heartbeat said healthy, and this process reaches it at that
// incarnation (the registry view may be a PEERS ahead). A broken control connection is noticed in
// milliseconds; silent heartbeats only after interval x misses. Placement, /v1/instances, readiness and the
// epd_instances gauge all use this, so they agree.
bool placeable(const PeerDirectory& peers, const RegistryEntry& e) {
  return e.load.healthy && !e.load.draining && peers.reaches(e.info.instance_id, e.info.incarnation);
}

// The registry's changes since the last placement, into the placement index (O(changes)).
void follow_registry(RouterState& st) {
  st.ctx.registry->take_changes([&](const std::string& id, const RegistryEntry* e) {
    if (e)
      st.placement.update(*e);
    else
      st.placement.erase(id);
  });
}

// The placeable instance of `role` that failed this request least, then (with `work`, cache-aware) whose
// cost in tokens is lowest, then with fewest rooms in flight from this router, then most free KV pages
// (placement_index.hpp gives the exact rule).
std::optional<Placement> pick(RouterState& st, const std::string& role,
                              const std::map<std::string, uint32_t>& failures,
                              const PlacementWork* work = nullptr) {
  const PeerDirectory& peers = st.ctx.bridge->peers();
  return st.placement.pick(role, failures, work, *st.prefix_index,
                           [&](const std::string& id, uint64_t inc) { return peers.reaches(id, inc); });
}

void release_attempt(RouterState& st, Attempt& a) {
  st.placement.discharge(a.prefill, a.prefill_work);
  st.placement.discharge(a.decode, a.decode_work);
  for (const auto* id : {&a.encoder, &a.prefill, &a.decode})
    if (!id->empty()) st.placement.remove_room(*id);
  st.room_to_request.erase(a.room);
}

void cancel_attempt(RouterState& st, const Attempt& a, const std::string& reason) {
  for (const auto* id : {&a.encoder, &a.prefill, &a.decode})
    if (!id->empty()) st.ctx.bridge->send(*id, protocol::Cancel{a.room, reason});
}

void start_attempt(RouterState& st, uint64_t req_id);

// What every role needs of the client's request besides the prompt: its id (for their logs) and sampling.
void set_request_fields(protocol::Submit& s, const GenerateRequest& r) {
  s.request_id = r.request_id;
  set_sampling(s, r.sampling);
  s.grammar = r.grammar;
  s.ignore_eos = r.ignore_eos;
}

// Starts queued requests while in-flight slots are free.
void admit_queued(RouterState& st) {
  while (!st.queue.empty() && st.active < st.limits.max_in_flight) {
    const uint64_t id = st.queue.front();
    st.queue.pop_front();
    auto it = st.requests.find(id);
    if (it == st.requests.end() || !it->second.queued) continue;
    it->second.queued = false;
    ++st.active;
    start_attempt(st, id);
  }
}

void publish_occupancy(RouterState& st) {
  st.metrics->occupancy(st.active, st.queue.size(), st.backlog.tokens(), st.backlog.tokens_per_second());
}

// The request's prompt leaves the backlog: `answered` (its first token came) or given up.
void settle_backlog(RouterState& st, Pending& p, bool answered) {
  if (!p.backlog) return;
  const auto now = kernel::DeadlineTimer::now(st.self);
  if (answered)
    st.backlog.answered(*p.backlog, now);
  else
    st.backlog.dropped(*p.backlog, now);
  p.backlog.reset();
}

// A request answered with an error (`code`), in /v1/stats and the metrics.
void count_failure(RouterState& st, const std::string& code) {
  ++st.stats.failed;
  ++st.stats.failure_causes[code];
  st.metrics->failed(code);
}

void count_retry(RouterState& st, ErrorCode code) {
  const std::string name(protocol::error_name(code));
  ++st.stats.retries;
  ++st.stats.retry_causes[name];
  st.metrics->retried(name);
}

// The request's answer goes out: free its attempt and its slot (letting a queued request in).
void finish(RouterState& st, std::map<uint64_t, Pending>::iterator it, GenerateResponse r) {
  Pending& p = it->second;
  r.attempts = p.attempts;
  r.prompt_tokens = uint32_t(p.prompt.size());
  if (r.room == 0) r.room = p.current.room;
  if (r.timings.first_token_ms == 0 && p.current.first_token)
    r.timings.first_token_ms = ms_between(p.started, *p.current.first_token);
  if (r.timings.total_ms == 0)
    r.timings.total_ms = ms_between(p.started, kernel::DeadlineTimer::now(st.self));
  auto sink = std::move(p.sink);
  settle_backlog(st, p, false);
  release_attempt(st, p.current);
  if (p.queued)
    std::erase(st.queue, it->first);
  else
    --st.active;
  st.requests.erase(it);
  sink->on_done(std::move(r));
  admit_queued(st);
  publish_occupancy(st);
}

void respond_error(RouterState& st, uint64_t req_id, const protocol::Error& e) {
  auto it = st.requests.find(req_id);
  if (it == st.requests.end()) return;
  GenerateResponse r;
  r.http_status = http_status_for(e.code);
  r.error_code = std::string(protocol::error_name(e.code));
  r.error = e.detail;
  r.tokens = it->second.streamed;
  r.logprobs = it->second.logprobs;
  count_failure(st, r.error_code);
  spdlog::warn("router: request {} [req {}] failed after {} attempt(s): {}", req_id,
               it->second.request.request_id, it->second.attempts, e.to_string());
  finish(st, it, std::move(r));
}

// How many streamed tokens a new attempt of `p` can go on from instead of drawing them again: all of them,
// unless the answer could already be complete (max_tokens or max_seq reached, or it ended) and only its
// RESULT is missing, or a drawn token is the image placeholder, which in a prompt would ask for an image
// row); then 0, and the attempt regenerates the whole answer (the streamed part is skipped).
uint32_t resumable_tokens(const RouterState& st, const Pending& p) {
  const uint32_t k = uint32_t(p.streamed.size());
  if (k == 0 || k >= p.request.max_tokens || p.prompt.size() + k >= st.ctx.model.max_seq) return 0;
  if (!p.request.ignore_eos && st.codec.codec && st.codec.codec->ends_generation(p.streamed.back())) return 0;
  const uint32_t image = model::image_token(st.ctx.model).value_or(model::kImage);
  if (std::find(p.streamed.begin(), p.streamed.end(), image) != p.streamed.end()) return 0;
  return k;
}

void start_attempt(RouterState& st, uint64_t req_id) {
  Pending& p = st.requests.at(req_id);
  p.current = Attempt{};
  Attempt a;
  a.started = kernel::DeadlineTimer::now(st.self);
  do a.room = st.rng();
  while (a.room == 0 || st.room_to_request.count(a.room));
  const PlacementWork prefill_work{p.blocks, p.prompt.size()};
  const PlacementWork decode_work{p.blocks, p.prompt.size() + p.request.max_tokens};
  follow_registry(st);
  auto decode = pick(st, "decode", p.failed_instances, &decode_work);
  auto prefill = pick(st, "prefill", p.failed_instances, &prefill_work);
  auto encoder = p.request.media.empty() ? std::optional<Placement>(Placement{})
                                         : pick(st, "encoder", p.failed_instances);
  if (!decode || !prefill || !encoder) {
    const char* missing = !decode ? "decode" : !prefill ? "prefill" : "encoder";
    // An instance may be restarting (epd-cluster brings it back): wait for one, boundedly.
    if (a.started - p.started < st.limits.unavailable_wait) {
      st.self->delayed_send(st.self, kUnavailablePoll, retry_atom::value, req_id);
      return;
    }
    std::string why = std::string("no healthy ") + missing + " instance is registered (waited " +
                      std::to_string(st.limits.unavailable_wait.count()) + " ms)";
    if (p.attempts > 0) why += "; the last attempt failed with " + p.last_error.to_string();
    return respond_error(st, req_id, make_error(ErrorCode::unknown_peer, why));
  }
  a.decode = decode->id;
  a.decode_inc = decode->incarnation;
  a.prefill = prefill->id;
  a.prefill_inc = prefill->incarnation;
  a.encoder = encoder->id;
  a.encoder_inc = encoder->incarnation;
  // Until prefill's first token (decode: the end) the room is work on them.
  a.prefill_work = prefill_work.tokens - std::min<uint64_t>(prefill_work.tokens, prefill->matched_tokens);
  a.decode_work = decode_work.tokens - std::min<uint64_t>(decode_work.tokens, decode->matched_tokens);
  st.placement.charge(a.prefill, a.prefill_work);
  st.placement.charge(a.decode, a.decode_work);
  if (p.backlog) {  // only what this prefill must compute is work ahead of later prompts
    st.backlog.recount(*p.backlog, a.prefill_work, a.started);
    p.backlog = a.prefill_work;
  }
  st.metrics->placed_prefix(p.prompt.size(), prefill->matched_tokens, decode->matched_tokens);
  ++p.attempts;
  p.current = a;
  st.room_to_request[a.room] = req_id;
  for (const auto* id : {&a.encoder, &a.prefill, &a.decode})
    if (!id->empty()) st.placement.add_room(*id);

  protocol::Submit s;
  s.room = a.room;
  s.attempt = p.attempts;
  s.prompt = p.prompt;
  s.image_tokens = p.image_tokens;
  s.images_key = p.images_key;
  s.image_grids = p.image_grids;
  s.max_tokens = p.request.max_tokens;
  if (const uint32_t k = resumable_tokens(st, p); k > 0) {
    // Go on from what was streamed: prefill computes prompt + those tokens, draws token k, decode the rest.
    s.prompt.insert(s.prompt.end(), p.streamed.begin(), p.streamed.begin() + k);
    s.max_tokens -= k;
    s.resume_from = k;
    p.current.resume_from = k;
    ++st.stats.resumed;
    st.stats.resumed_tokens += k;
    st.metrics->resumed(k);
  }
  s.encoder = a.encoder;
  s.prefill = a.prefill;
  s.decode = a.decode;
  set_request_fields(s, p.request);
  const auto left =
      st.ctx.cluster->cluster.request_timeout - (kernel::DeadlineTimer::now(st.self) - p.started);
  s.budget_ms =
      uint32_t(std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::milliseconds>(left).count()));
  spdlog::debug("router: request {} [req {}] is room {} on {}/{}/{} (attempt {})", req_id,
                p.request.request_id, a.room, a.encoder, a.prefill, a.decode, p.attempts);
  // Decode first: its BOOTSTRAP is usually what prefill waits for longest.
  st.ctx.bridge->send(a.decode, s);
  if (!a.encoder.empty()) {
    protocol::Submit e = s;
    e.images = p.request.media;
    e.prompt.clear();
    st.ctx.bridge->send(a.encoder, std::move(e));
  }
  st.ctx.bridge->send(a.prefill, std::move(s));
}

// The current attempt of `req_id` failed because of `culprit`: retry it as a new room (retryable cause,
// attempts left), else answer the client with the cause.
// Counts the failure against the instance to avoid on the retry. An instance that reports peer_died or
// peer_unreachable is alive (it just told us); the trouble is another member of the attempt, which we may not
// have heard is dead yet (a killed prefill is refused by decode before the registry's PEERS reaches us):
// count it against those, or every retry goes straight back to the dead one.
void blame(Pending& p, const std::string& culprit, protocol::ErrorCode code, bool culprit_reported) {
  const bool peer_trouble = code == ErrorCode::peer_died || code == ErrorCode::peer_unreachable;
  if (!culprit_reported || !peer_trouble) {
    ++p.failed_instances[culprit];
    return;
  }
  for (const auto* id : {&p.current.encoder, &p.current.prefill, &p.current.decode})
    if (!id->empty() && *id != culprit) ++p.failed_instances[*id];
}

// `reported`: `culprit` sent the failure itself (else we saw `culprit` die).
void attempt_failed(RouterState& st, uint64_t req_id, const protocol::Error& e, const std::string& culprit,
                    bool reported) {
  Pending& p = st.requests.at(req_id);
  cancel_attempt(st, p.current, "failed at '" + culprit + "'");
  release_attempt(st, p.current);
  p.last_error = e;
  const uint32_t max_attempts = st.ctx.cluster->cluster.max_attempts;
  if (e.code == ErrorCode::out_of_capacity) {
    // The cluster is full for the moment (more requests admitted than decode has rooms for): nobody's
    // fault, so it costs no attempt. Place the request again shortly; request_timeout still bounds it.
    ++p.capacity_waits;
    count_retry(st, e.code);
    blame(p, culprit, e.code, reported);
    p.current = Attempt{};
    st.self->delayed_send(st.self, kCapacityBackoff, retry_atom::value, req_id);
    return;
  }
  if (protocol::is_retryable(e.code) && p.attempts - p.capacity_waits < max_attempts) {
    spdlog::info("router: room {} [req {}] failed ({}); retrying (attempt {}/{})", p.current.room,
                 p.request.request_id, e.to_string(), p.attempts + 1, max_attempts);
    count_retry(st, e.code);
    blame(p, culprit, e.code, reported);
    start_attempt(st, req_id);
    return;
  }
  respond_error(st, req_id, e);
}

// An instance (that incarnation) is dead to us: every attempt placed on it fails now, not at a timeout.
void on_instance_lost(RouterState& st, const PeerDirectory::Change& c) {
  auto hit = kernel::sharing_lost_peer(st.requests, c);
  if (!hit.empty())
    spdlog::warn("router: '{}' (incarnation {}) is gone; failing its {} attempt(s)", c.id, c.old_incarnation,
                 hit.size());
  for (uint64_t req_id : hit) attempt_failed(st, req_id, kernel::peer_lost_error(c), c.id, false);
}

// Passes on the tokens of [index, index + n) the sink has not seen, with their log-probabilities when the
// request asked (`logprobs` then fits them: the caller checked). A retried room starts again at 0 and
// regenerates what was streamed (sampling is a function of seed and position): those are skipped, and a
// difference is logged, since it would mean two instances computed different answers. Skipped tokens keep
// the log-probabilities they were streamed with.
void stream_tokens(Pending& p, uint32_t index, std::span<const uint32_t> tokens,
                   const std::optional<protocol::Logprobs>& logprobs) {
  const size_t have = p.streamed.size();
  if (index > have) return;  // a gap (a lost TOKENS frame): the RESULT carries them all
  for (size_t i = 0; i < tokens.size() && index + i < have; ++i)
    if (p.streamed[index + i] != tokens[i]) {
      spdlog::error("router: room {} [req {}] regenerated token {} as {}, not {}: instances disagree",
                    p.current.room, p.request.request_id, index + i, tokens[i], p.streamed[index + i]);
      break;
    }
  if (index + tokens.size() <= have) return;
  auto fresh = tokens.subspan(have - index);
  p.streamed.insert(p.streamed.end(), fresh.begin(), fresh.end());
  if (p.request.sampling.logprobs) {
    auto all = from_wire(*logprobs);
    const size_t before = p.logprobs.size();
    p.logprobs.insert(p.logprobs.end(), std::make_move_iterator(all.begin() + (have - index)),
                      std::make_move_iterator(all.end()));
    p.sink->on_logprobs(std::span(p.logprobs).subspan(before));
  }
  p.sink->on_tokens(fresh);
}

// TOKENS or RESULT carries a log-probability for each of its tokens, when the request asked for them.
bool logprobs_ok(const Pending& p, const std::optional<protocol::Logprobs>& l, size_t tokens) {
  return !p.request.sampling.logprobs ||
         (l && protocol::logprobs_fit(*l, tokens, p.request.sampling.top_logprobs));
}

void on_result(RouterState& st, const Envelope& env, protocol::RoomResult& res) {
  auto rit = st.room_to_request.find(res.room);
  if (rit == st.room_to_request.end()) return;  // a finished or superseded attempt
  const uint64_t req_id = rit->second;
  auto it = st.requests.find(req_id);
  Pending& p = it->second;
  if (res.ok) {
    if (env.sender != p.current.decode) return;
    const auto now = kernel::DeadlineTimer::now(st.self);
    if (!logprobs_ok(p, res.logprobs, res.tokens.size()))
      return attempt_failed(st, req_id,
                            make_error(ErrorCode::internal, "'" + env.sender +
                                                                "': RESULT's logprobs do not "
                                                                "match its tokens"),
                            env.sender, true);
    // A resumed attempt reports the tokens it drew; the answer starts with those it went on from (and
    // their log-probabilities, as they were streamed).
    const uint32_t k = std::min<uint32_t>(p.current.resume_from, uint32_t(p.streamed.size()));
    res.tokens.insert(res.tokens.begin(), p.streamed.begin(), p.streamed.begin() + k);
    if (p.request.sampling.logprobs) {
      protocol::Logprobs before = to_wire(std::span(p.logprobs).first(k), p.request.sampling.top_logprobs);
      for (auto& x : from_wire(*res.logprobs)) append_logprobs(before, x, p.request.sampling.top_logprobs);
      res.logprobs = std::move(before);
    }
    stream_tokens(p, 0, res.tokens, res.logprobs);
    settle_backlog(st, p, true);  // a RESULT without TOKENS before it (their frames lost)
    st.metrics->completed(ms_between(p.started, p.current.first_token.value_or(now)) / 1000,
                          ms_between(p.started, now) / 1000, res, uint32_t(p.prompt.size()));
    GenerateResponse r;
    r.tokens = std::move(res.tokens);
    r.logprobs = p.logprobs;
    if (const auto& codec = st.codec.codec) {
      r.text = codec->text(r.tokens, p.request.ignore_eos);
      r.ended_at_eos = !p.request.ignore_eos && !r.tokens.empty() && codec->ends_generation(r.tokens.back());
    }
    r.room = res.room;
    r.encoder = p.current.encoder;
    r.prefill = p.current.prefill;
    r.decode = p.current.decode;
    r.timings.encode_ms = double(res.encode_us) / 1000;
    r.timings.prefill_ms = double(res.prefill_us) / 1000;
    r.timings.transfer_ms = double(res.transfer_us) / 1000;
    r.timings.decode_ms = double(res.decode_us) / 1000;
    r.timings.first_token_ms = ms_between(p.started, p.current.first_token.value_or(now));
    r.timings.total_ms = ms_between(p.started, now);
    ++st.stats.completed;
    finish(st, it, std::move(r));
    return;
  }
  attempt_failed(st, req_id, make_error(res.code, "'" + env.sender + "': " + res.reason), env.sender, true);
}

// The request ran out of time: cancel its attempt, answer 504 naming the room and the last failure.
void time_out(RouterState& s, uint64_t id) {
  auto it = s.requests.find(id);
  if (it == s.requests.end()) return;
  cancel_attempt(s, it->second.current, "request timed out");
  std::string why = "no answer within " + std::to_string(s.ctx.cluster->cluster.request_timeout.count()) +
                    " ms (" +
                    (it->second.queued ? std::string("still queued")
                                       : "room " + std::to_string(it->second.current.room) + ", attempt " +
                                             std::to_string(it->second.attempts)) +
                    ")";
  if (it->second.attempts > 1)
    why += "; the previous attempt failed with " + it->second.last_error.to_string();
  respond_error(s, id, make_error(ErrorCode::timeout, why));
}

void arm_timeout(RouterState& st) {
  if (st.requests.empty()) return;
  st.deadline.arm(st.self, st.requests.begin()->second.started + st.ctx.cluster->cluster.request_timeout);
}

void on_tokens(RouterState& st, const Envelope& env, protocol::Tokens& t) {
  auto rit = st.room_to_request.find(t.room);
  if (rit == st.room_to_request.end()) return;
  auto& p = st.requests.at(rit->second);
  if (env.sender != p.current.decode) return;
  const auto now = kernel::DeadlineTimer::now(st.self);
  if (!p.current.first_token) {
    p.current.first_token = now;
    st.placement.discharge(p.current.prefill, p.current.prefill_work);  // prefill's part is done
    settle_backlog(st, p, true);
    publish_occupancy(st);
    // Both hold the prompt's KV now, and their caches keep it: from here on the prompt's blocks are
    // believed cached there. Not earlier: an attempt that fails (say, on a stalled prefill) must not make
    // its retry look cheaper on the same instance.
    st.prefix_index->insert(p.current.prefill, p.blocks);
    st.prefix_index->insert(p.current.decode, p.blocks);
  }
  const size_t before = p.streamed.size();
  if (!logprobs_ok(p, t.logprobs, t.tokens.size())) {  // as a lost frame: RESULT carries them all
    spdlog::error("router: room {} [req {}] TOKENS from '{}' without their logprobs", t.room,
                  p.request.request_id, env.sender);
    return;
  }
  stream_tokens(p, t.index, t.tokens, t.logprobs);
  if (p.streamed.size() == before) return;  // nothing new (a retry regenerating what was streamed)
  if (p.last_streamed)
    st.metrics->tokens_streamed(ms_between(*p.last_streamed, now) / 1000, p.streamed.size() - before);
  p.last_streamed = now;
}

// The caller gave up (client gone, stop sequence reached): stop the room on every role now.
void cancel_request(RouterState& st, uint64_t ticket, const std::string& reason) {
  auto it = st.requests.find(ticket);
  if (it == st.requests.end()) return;
  cancel_attempt(st, it->second.current, reason);
  ++st.stats.cancelled;
  st.metrics->request_done("cancelled");
  spdlog::info("router: request {} [req {}] cancelled ({})", ticket, it->second.request.request_id, reason);
  GenerateResponse r;
  r.http_status = 499;
  r.error_code = std::string(protocol::error_name(ErrorCode::aborted));
  r.error = "cancelled: " + reason;
  r.tokens = it->second.streamed;
  r.logprobs = it->second.logprobs;
  finish(st, it, std::move(r));
}

struct LateRefusal {
  std::string why;
  uint32_t retry_after_s = 1;
};

// A prompt of `tokens` expected to wait longer than max_queue_wait for its first token, behind the prompts
// accepted before it, is refused now: a 429 the client can retry beats a 504 at the end of its budget.
// Retry-After is how long the backlog takes to shrink enough, at the measured rate, if nothing else came.
// Before the first answer there is no rate, and nothing is refused for its wait.
std::optional<LateRefusal> expected_late(const RouterState& s, uint64_t tokens) {
  const auto limit = std::chrono::duration<double>(s.limits.max_queue_wait).count();
  const auto wait = s.backlog.wait_seconds(tokens);
  if (limit <= 0 || !wait || *wait <= limit) return std::nullopt;
  char figures[160];
  std::snprintf(figures, sizeof figures, "about %.1f s at the %.0f prompt tokens/s measured lately", *wait,
                *s.backlog.tokens_per_second());
  LateRefusal r;
  r.why = "the prompts ahead (" + std::to_string(s.backlog.tokens()) + " tokens) and this one (" +
          std::to_string(tokens) + ") would take " + figures + " to reach a first token, more than " +
          std::to_string(s.limits.max_queue_wait.count()) + " ms (max_queue_wait_ms)";
  r.retry_after_s = uint32_t(std::min(3600.0, std::max(1.0, std::ceil(*wait - limit))));
  return r;
}

void on_generate(RouterState& s, uint64_t ticket, GenerateRequest& req, SinkPtr& sink) {
  ++s.stats.requests;
  auto reject = [&](int status, std::string code, std::string why, uint32_t retry_after = 0) {
    GenerateResponse bad;
    bad.http_status = status;
    bad.error_code = std::move(code);
    bad.error = std::move(why);
    bad.retry_after_s = retry_after;
    sink->on_done(std::move(bad));
  };
  if (s.active >= s.limits.max_in_flight && s.queue.size() >= s.limits.max_queued) {
    ++s.stats.rejected;
    s.metrics->request_done("rejected");
    return reject(429, "out_of_capacity",
                  "the router is at its limit of " + std::to_string(s.limits.max_in_flight) +
                      " requests in flight and " + std::to_string(s.limits.max_queued) + " queued",
                  1);
  }
  std::vector<model::MediaDims> dims;
  std::vector<std::optional<ContentHash>> hashes;  // each item's decoded pixels or samples
  for (size_t i = 0; i < req.media.size(); ++i) {
    auto item = model::parse_media_item(req.media[i]);
    if (!item) {
      count_failure(s, "invalid_request");
      return reject(400, "invalid_request",
                    std::string(model::media_item_kind(req.media[i])) + " " + std::to_string(i) + ": " +
                        item.error().detail);
    }
    dims.push_back(model::media_dims(*item));
    hashes.push_back(content_hash(*item));
  }
  protocol::Result<std::vector<uint32_t>> prompt = std::vector<uint32_t>{};
  if (!req.prompt_tokens.empty()) {  // token ids as given: no template, no image
    if (!req.messages.empty() || !dims.empty()) {
      count_failure(s, "invalid_request");
      return reject(400, "invalid_request", "prompt_tokens take neither messages nor an image");
    }
    prompt = model::check_prompt_tokens(s.ctx.model, req.prompt_tokens);
  } else if (!s.codec.codec) {
    count_failure(s, "invalid_request");
    return reject(
        400, "invalid_request",
        "model " + s.ctx.model.name + " takes only \"prompt_tokens\" (token ids): " + s.codec.missing);
  } else if (!req.messages.empty()) {
    prompt = s.codec.codec->chat(req.messages, dims, req.tools);
  } else {
    prompt = s.codec.codec->prompt(req.prompt, dims);
  }
  if (!prompt) {
    // config_error: the checkpoint's chat template is of no supported family (the request is fine).
    const auto code = prompt.error().code;
    const std::string name(protocol::error_name(code));
    count_failure(s, name);
    return reject(code == ErrorCode::config_error ? 422 : 400, name, prompt.error().detail);
  }
  std::vector<uint32_t> grids;  // where an M-RoPE model's image rows rotate
  if (s.codec.codec && !dims.empty()) {
    auto g = s.codec.codec->image_grids(dims);
    if (!g) {
      count_failure(s, "invalid_request");
      return reject(400, "invalid_request", g.error().detail);
    }
    for (const model::ImageGrid& grid : *g) grids.insert(grids.end(), {grid.cols, grid.rows});
  }
  if (!req.grammar.empty()) {  // parsed here once, so a bad one is a 400 and never a failed room
    if (auto g = s.grammars->state(req.grammar, {}); !g) {
      count_failure(s, "invalid_request");
      return reject(400, "invalid_request", g.error().detail);
    }
  }
  if (auto late = expected_late(s, prompt->size())) {
    ++s.stats.rejected;
    s.metrics->request_done("rejected");
    spdlog::debug("router: request [req {}] refused: {}", req.request_id, late->why);
    return reject(429, "out_of_capacity", late->why, late->retry_after_s);
  }
  Pending p;
  p.sink = std::move(sink);
  p.request = std::move(req);
  p.prompt = std::move(prompt.value());
  p.image_grids = std::move(grids);
  p.backlog = p.prompt.size();
  s.backlog.add(p.prompt.size(), kernel::DeadlineTimer::now(s.self));
  const auto slot = model::image_token(s.ctx.model);
  p.image_tokens = slot ? uint32_t(std::count(p.prompt.begin(), p.prompt.end(), *slot)) : 0;
  uint64_t images = 0;  // the request's pictures and clips, for the blocks that hold their rows
  for (const auto& item : p.request.media) images = XXH3_64bits_withSeed(item.data(), item.size(), images);
  p.blocks = s.prefix_index->blocks(p.prompt, slot, images);
  // Decode's prefix cache keys media rows by the content's hash, as the encoder's embedding cache does.
  if (auto key = images_hash(hashes, {})) p.images_key.assign(key->begin(), key->end());
  p.started = kernel::DeadlineTimer::now(s.self);
  p.queued = s.active >= s.limits.max_in_flight;
  s.requests.emplace(ticket, std::move(p));
  if (s.requests.size() == 1 || !s.deadline.armed()) arm_timeout(s);
  if (s.requests.at(ticket).queued) {
    s.queue.push_back(ticket);
  } else {
    ++s.active;
    start_attempt(s, ticket);
  }
  publish_occupancy(s);
}

using Table = kernel::MessageTable<RouterState>;

caf::behavior router(caf::stateful_actor<RouterState>* self, RoleContext ctx,
                     kernel::TablePtr<RouterState> table, RouterLimits limits, RouterCodec codec) {
  auto& st = kernel::start(self, std::move(ctx));
  st.limits = limits;
  st.codec = std::move(codec);
  st.grammars = std::make_unique<RoomGrammars>(st.ctx.model);
  st.metrics = std::make_unique<RouterMetrics>(*st.ctx.metrics);
  st.prefix_index = std::make_unique<PrefixIndex>(st.ctx.model.page_size, limits.prefix_index_blocks);
  return kernel::role_behavior(
      self, table,
      {
          [=](generate_atom, uint64_t ticket, GenerateRequest& req, SinkPtr& sink) {
            on_generate(self->state, ticket, req, sink);
          },
          [=](cancel_atom, uint64_t ticket, std::string& reason) {
            cancel_request(self->state, ticket, reason);
          },
          [=](retry_atom, uint64_t id) {
            auto& s = self->state;
            auto it = s.requests.find(id);
            if (it != s.requests.end() && !it->second.queued && it->second.current.room == 0)
              start_attempt(s, id);
          },
          [=](stats_atom, std::function<void(RouterStats)>& done) {
            const auto& s = self->state;
            RouterStats out = s.stats;
            out.in_flight = s.active;
            out.queued = s.queue.size();
            out.prompt_backlog_tokens = s.backlog.tokens();
            out.prompt_tokens_per_s = s.backlog.tokens_per_second();
            out.tables = {{"requests", s.requests.size()},
                          {"rooms", s.room_to_request.size()},
                          {"queue", s.queue.size()},
                          {"instances_in_flight", s.placement.instances_in_flight()},
                          {"timeout_timers", s.deadline.armed() ? 1 : 0}};
            done(std::move(out));
          },
          [=](timeout_atom) {
            auto& s = self->state;
            s.deadline.fired();
            const auto now = kernel::DeadlineTimer::now(self);
            while (!s.requests.empty() &&
                   now - s.requests.begin()->second.started >= s.ctx.cluster->cluster.request_timeout)
              time_out(s, s.requests.begin()->first);
            arm_timeout(s);
          },
          [=](PeerChanges& pc) {
            for (const auto& c : pc.changes) {
              // A restarted or departed instance's cache is gone.
              if (c.old_incarnation != 0) self->state.prefix_index->forget(c.id);
              if (c.old_incarnation != 0) on_instance_lost(self->state, c);
            }
          },
      });
}

// RouterService on top of the router actor, for the HTTP threads.
class ActorRouterService final : public RouterService {
 public:
  ActorRouterService(caf::actor router, std::shared_ptr<RegistryView> registry, BridgePtr bridge,
                     std::string model_id, std::shared_ptr<const model::PromptCodec> codec)
      : router_(std::move(router)),
        registry_(std::move(registry)),
        bridge_(std::move(bridge)),
        model_id_(std::move(model_id)),
        codec_(std::move(codec)) {}

  uint64_t generate(GenerateRequest request, std::shared_ptr<GenerationSink> sink) override {
    const uint64_t ticket = next_ticket_.fetch_add(1);
    caf::anon_send(router_, generate_atom::value, ticket, std::move(request), std::move(sink));
    return ticket;
  }

  void cancel(uint64_t ticket, std::string reason) override {
    caf::anon_send(router_, cancel_atom::value, ticket, std::move(reason));
  }

  std::vector<InstanceView> instances() override {
    std::vector<InstanceView> out;
    const auto now = clock::now();
    for (const auto& e : registry_->entries()) {
      InstanceView v;
      v.id = e.info.instance_id;
      v.role = e.info.role;
      v.control_endpoint = e.info.control_endpoint;
      v.incarnation = e.info.incarnation;
      v.identity = e.info.identity;
      v.load = e.load;
      v.load.healthy = placeable(bridge_->peers(), e);
      v.last_seen_ms =
          uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(now - e.last_seen).count());
      out.push_back(std::move(v));
    }
    return out;
  }

  // If the router is gone the message and `done` are dropped: the exchange `done` holds then answers 500.
  void stats(std::function<void(RouterStats)> done) override {
    caf::anon_send(router_, stats_atom::value, std::move(done));
  }

  // Ready when every role a request may need has a healthy registered instance.
  http::Readiness readiness() override {
    std::set<std::string> healthy;
    for (const auto& e : registry_->entries())
      if (placeable(bridge_->peers(), e)) healthy.insert(e.info.role);
    for (const char* role : {"encoder", "prefill", "decode"})
      if (!healthy.count(role)) return {false, std::string("no healthy ") + role + " instance is registered"};
    return {true, {}};
  }

  std::string model_id() override { return model_id_; }
  std::shared_ptr<const model::PromptCodec> codec() override { return codec_; }

 private:
  caf::actor router_;
  std::shared_ptr<RegistryView> registry_;
  BridgePtr bridge_;
  const std::string model_id_;
  const std::shared_ptr<const model::PromptCodec> codec_;
  std::atomic<uint64_t> next_ticket_{1};
};

// Owns the HTTP server for the router's lifetime; stopped when the router actor terminates.
struct HttpFront {
  std::unique_ptr<ActorRouterService> service;
  std::unique_ptr<HttpApi> api;
};

std::string model_id_of(const config::ClusterConfig& c) {
  return c.model.path.empty() ? "epd-" + c.model.preset : c.model.path.stem().string();
}

protocol::Result<RoleHandle> spawn_router(RoleContext& ctx, RouterSettings settings) {
  if (!ctx.registry)
    return make_error(ErrorCode::config_error, "router '" + ctx.instance->id +
                                                   "' must host the registry ([cluster] registry = \"" +
                                                   ctx.instance->id + "\")");
  HttpApiConfig http_config;
  http_config.generate.max_tokens_limit = settings.max_tokens_limit;
  http_config.server.io_threads = settings.http_threads;
  http_config.server.max_connections = settings.http_max_connections;
  http_config.api_keys = settings.api_keys;
  http_config.tls = settings.tls;
  auto table = std::make_shared<Table>();
  table->on<protocol::Tokens>(on_tokens).on<protocol::RoomResult>(on_result);
  RouterLimits limits{settings.max_in_flight, settings.max_queued,
                      settings.max_queue_wait.value_or(ctx.cluster->cluster.request_timeout / 2),
                      settings.unavailable_wait, settings.prefix_index_blocks};
  RouterCodec codec;
  if (auto c = model::PromptCodec::for_model(ctx.model)) {
    codec.codec = std::move(*c);
  } else {
    // The reference model's codec cannot fail; an mmproj that does not fit is refused at start.
    if (ctx.model.checkpoint.empty() || !ctx.model.mmproj.empty()) return c.error();
    codec.missing = c.error().detail;
    spdlog::warn("router: model {} is served by token ids only: {}", ctx.model.name, codec.missing);
  }
  auto main = kernel::spawn_main(ctx, router, kernel::TablePtr<RouterState>(table), limits, codec);
  ctx.metrics->on_scrape([registry = ctx.registry, bridge = ctx.bridge](metrics::Snapshot& s) {
    std::map<std::pair<std::string, bool>, int> count;
    for (const auto& e : registry->entries()) ++count[{e.info.role, placeable(bridge->peers(), e)}];
    for (const auto& [key, n] : count)
      s.gauge("epd_instances", "Instances the registry lists, by role and health", n,
              {{"peer_role", key.first}, {"healthy", key.second ? "true" : "false"}});
  });
  if (!main) return main.error();
  RoleHandle h{*main, std::nullopt, 0, {}, {}, {}};
  auto front = std::make_shared<HttpFront>();
  front->service = std::make_unique<ActorRouterService>(h.main, ctx.registry, ctx.bridge,
                                                        model_id_of(*ctx.cluster), codec.codec);
  front->api = std::make_unique<HttpApi>(*front->service, http_config);
  auto bound = front->api->start(settings.http_host, settings.http_port);
  if (!bound) {
    caf::anon_send_exit(h.main, caf::exit_reason::user_shutdown);
    return bound.error();
  }
  spdlog::info("router: HTTP API on {}://{}:{}", settings.tls ? "https" : "http", settings.http_host, *bound);
  ctx.metrics->on_scrape([front](metrics::Snapshot& s) {
    s.counter("epd_http_unauthorized_total", "HTTP requests refused 401 for a missing or wrong API key",
              double(front->api->unauthorized()));
    s.counter("epd_http_auth_throttled_total",
              "HTTP requests refused 429 because their address failed authentication too often lately",
              double(front->api->auth_throttled()));
    if (front->api->config().tls)
      s.counter("epd_http_tls_handshake_failures_total",
                "TLS handshakes on the HTTP listener that failed or timed out",
                double(front->api->tls_handshake_failures()));
  });
  h.main->attach_functor([front] { front->api->stop(); });
  h.drain = [front, grace = settings.drain_timeout] { front->api->drain(grace); };
  return h;
}

// http = "HOST:PORT" (port 0: any free port).
protocol::Status read_http(const RoleContext&, const config::Settings& cfg, RouterSettings& out) {
  auto http = cfg.get_string("http", out.http_host + ":" + std::to_string(out.http_port));
  if (!http) return http.error();
  auto hp = config::parse_host_port(*http, "http", cfg.where());
  if (!hp) return hp.error();
  out.http_host = hp->host;
  out.http_port = hp->port;
  return {};
}

// max_queue_wait_ms: absent, half the request timeout (spawn_router); 0, no refusal for the wait.
protocol::Status read_queue_wait(const RoleContext&, const config::Settings& cfg, RouterSettings& out) {
  if (!cfg.has("max_queue_wait_ms")) return {};
  auto ms = cfg.get_ms("max_queue_wait_ms", {});
  if (!ms) return ms.error();
  out.max_queue_wait = *ms;
  return {};
}

// Paths in the router's settings are relative to the cluster file, like [model] path.
std::filesystem::path config_relative(const RoleContext& ctx, const std::string& path) {
  std::filesystem::path p(path);
  if (p.is_relative() && ctx.cluster) p = ctx.cluster->file.parent_path() / p;
  return p;
}

// api_keys_file = "PATH": the keys every API route requires (Authorization: Bearer); loaded and checked here
// so a bad file stops the router before it listens.
protocol::Status read_api_keys(const RoleContext& ctx, const config::Settings& cfg, RouterSettings& out) {
  auto file = cfg.get_string("api_keys_file", "");
  if (!file) return file.error();
  if (cfg.has("api_keys_file") && file->empty())
    return make_error(ErrorCode::config_error, cfg.where() + ": api_keys_file must not be empty");
  if (file->empty()) return {};
  auto keys = http::ApiKeys::load(config_relative(ctx, *file));
  if (!keys) return make_error(ErrorCode::config_error, cfg.where() + ": " + keys.error().detail);
  out.api_keys = std::make_shared<const http::ApiKeys>(std::move(*keys));
  return {};
}

// tls_cert = "PATH", tls_key = "PATH" (PEM): both or neither. The files are loaded when the listener starts.
protocol::Status read_tls(const RoleContext& ctx, const config::Settings& cfg, RouterSettings& out) {
  auto cert = cfg.get_string("tls_cert", "");
  if (!cert) return cert.error();
  auto key = cfg.get_string("tls_key", "");
  if (!key) return key.error();
  if (cert->empty() != key->empty() || (cfg.has("tls_cert") && cert->empty()))
    return make_error(ErrorCode::config_error,
                      cfg.where() + ": tls_cert and tls_key go together (both PEM file paths, or neither)");
  if (cert->empty()) return {};
  out.tls = http::TlsFiles{config_relative(ctx, *cert), config_relative(ctx, *key)};
  return {};
}

}  // namespace

RoleSpec router_role_spec() {
  kernel::SettingsSchema<RouterSettings> settings;
  settings.add({"http"}, read_http)
      .u32("max_tokens_limit", &RouterSettings::max_tokens_limit, 1, 1u << 20)
      .ms("unavailable_wait_ms", &RouterSettings::unavailable_wait)
      .u32("max_in_flight", &RouterSettings::max_in_flight, 1, 1u << 20)
      .u32("max_queued", &RouterSettings::max_queued, 0, 1u << 20)
      .add({"max_queue_wait_ms"}, read_queue_wait)
      .ms("drain_timeout_ms", &RouterSettings::drain_timeout)
      .u32("http_threads", &RouterSettings::http_threads, 1, 64)
      .u32("http_max_connections", &RouterSettings::http_max_connections, 1, 1u << 20)
      .u32("prefix_index_blocks", &RouterSettings::prefix_index_blocks, 0, 1u << 24)
      .add({"api_keys_file"}, read_api_keys)
      .add({"tls_cert", "tls_key"}, read_tls);
  return kernel::make_role_spec(
      "router", "HTTP front door; places rooms on encoder/prefill/decode instances and retries failures",
      false, std::move(settings), spawn_router);
}

}  // namespace epd::actors
