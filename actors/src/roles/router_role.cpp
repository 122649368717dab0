// The router role: the front door. It turns a generate call into a room (encoder for the image, prefill,
// decode — each picked by least load among healthy registered instances), sends the SUBMITs, collects
// TOKENS and the final RESULT, and retries a failed room on other instances when the cause is retryable,
// up to max_attempts. Every call ends within request_timeout: with tokens or with an error naming the cause.
#include <spdlog/spdlog.h>

#include <map>
#include <random>
#include <set>

#include "epd/actors/kernel/role_kernel.hpp"
#include "epd/http/http_api.hpp"
#include "epd/http/router_service.hpp"
#include "epd/model/image.hpp"
#include "epd/model/tokens.hpp"
#include "roles/roles.hpp"

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::http::GenerateRequest)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::http::GenerateResponse)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::http::RouterStats)

namespace epd::actors {
namespace {

using http::GenerateRequest;
using http::GenerateResponse;
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
constexpr std::chrono::milliseconds kUnavailablePoll{100};

double ms_between(clock::time_point a, clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct Attempt {
  uint64_t room = 0;  // 0: no attempt running (waiting for an instance to come back)
  std::string encoder, prefill, decode;
  uint64_t encoder_inc = 0, prefill_inc = 0, decode_inc = 0;  // the incarnations it was placed on
  clock::time_point started;
  std::optional<clock::time_point> first_token;
};

struct Pending {
  caf::response_promise promise;
  GenerateRequest request;
  std::vector<uint32_t> prompt;
  uint32_t image_tokens = 0;
  uint32_t attempts = 0;
  Attempt current;
  clock::time_point started;
  // Failures of this request per instance: a retry goes to the instance that failed it least (then the
  // least loaded), so an instance that fails fast cannot take every attempt before its heartbeat says so.
  std::map<std::string, uint32_t> failed_instances;
  protocol::Error last_error;  // why the previous attempt failed (named if we give up)

  // The instances whose loss fails the current attempt (none while waiting for one to come back).
  std::vector<kernel::SharedPeer> shared_peers() const {
    if (current.room == 0) return {};
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
};

struct RouterState : kernel::RoleBase {
  std::map<uint64_t, uint64_t> room_to_request;
  std::map<uint64_t, Pending> requests;
  std::map<std::string, uint32_t> inflight;  // rooms this router has on each instance (no zero entries)
  uint64_t next_request = 1;
  std::mt19937_64 rng{std::random_device{}()};
  RouterStats stats;
  std::chrono::milliseconds unavailable_wait{5000};
  static inline const char* name = "router";
};

int http_status_for(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_request:
      return 400;
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

struct Placement {
  std::string id;
  uint64_t incarnation = 0;
};

// Least loaded healthy instance of `role`: fewest rooms in flight from this router, then most free KV pages.
// Instances that are dead to this process (connection lost, registry not caught up yet) are skipped.
std::optional<Placement> pick(RouterState& st, const std::string& role,
                              const std::map<std::string, uint32_t>& failures) {
  std::optional<Placement> best;
  std::tuple<uint32_t, uint32_t, int64_t> best_score{UINT32_MAX, UINT32_MAX, 0};
  for (const auto& e : st.ctx.registry->entries()) {
    if (e.info.role != role || !e.info.load.healthy) continue;
    // Only what this process can address at that incarnation (the registry view may be a PEERS ahead).
    auto p = st.ctx.bridge->peers().find(e.info.instance_id);
    if (!p || p->incarnation != e.info.incarnation || !st.ctx.bridge->peers().alive(e.info.instance_id))
      continue;
    auto n = st.inflight.find(e.info.instance_id);
    auto f = failures.find(e.info.instance_id);
    const std::tuple<uint32_t, uint32_t, int64_t> score{f == failures.end() ? 0 : f->second,
                                                        n == st.inflight.end() ? 0 : n->second,
                                                        -int64_t(e.info.load.free_kv_pages)};
    if (!best || score < best_score) {
      best = Placement{e.info.instance_id, e.info.incarnation};
      best_score = score;
    }
  }
  return best;
}

void release_attempt(RouterState& st, const Attempt& a) {
  for (const auto* id : {&a.encoder, &a.prefill, &a.decode}) {
    auto n = st.inflight.find(*id);
    if (n != st.inflight.end() && --n->second == 0) st.inflight.erase(n);  // instances may leave for good
  }
  st.room_to_request.erase(a.room);
}

void cancel_attempt(RouterState& st, const Attempt& a, const std::string& reason) {
  for (const auto* id : {&a.encoder, &a.prefill, &a.decode})
    if (!id->empty()) st.ctx.bridge->send(*id, protocol::Cancel{a.room, reason});
}

void respond_error(RouterState& st, uint64_t req_id, const protocol::Error& e) {
  auto it = st.requests.find(req_id);
  if (it == st.requests.end()) return;
  Pending& p = it->second;
  GenerateResponse r;
  r.http_status = http_status_for(e.code);
  r.error_code = std::string(protocol::error_name(e.code));
  r.error = e.detail;
  r.attempts = p.attempts;
  r.room = p.current.room;
  r.timings.total_ms = ms_between(p.started, kernel::DeadlineTimer::now(st.self));
  ++st.stats.failed;
  ++st.stats.failure_causes[r.error_code];
  spdlog::warn("router: request {} failed after {} attempt(s): {}", req_id, p.attempts, e.to_string());
  p.promise.deliver(std::move(r));
  release_attempt(st, p.current);
  st.requests.erase(it);
}

void start_attempt(RouterState& st, uint64_t req_id) {
  Pending& p = st.requests.at(req_id);
  p.current = Attempt{};
  Attempt a;
  a.started = kernel::DeadlineTimer::now(st.self);
  do a.room = st.rng();
  while (a.room == 0 || st.room_to_request.count(a.room));
  auto decode = pick(st, "decode", p.failed_instances);
  auto prefill = pick(st, "prefill", p.failed_instances);
  auto encoder = p.request.image_ppm.empty() ? std::optional<Placement>(Placement{})
                                             : pick(st, "encoder", p.failed_instances);
  if (!decode || !prefill || !encoder) {
    const char* missing = !decode ? "decode" : !prefill ? "prefill" : "encoder";
    // An instance may be restarting (epd-cluster brings it back): wait for one, boundedly.
    if (a.started - p.started < st.unavailable_wait) {
      st.self->delayed_send(st.self, kUnavailablePoll, retry_atom::value, req_id);
      return;
    }
    std::string why = std::string("no healthy ") + missing + " instance is registered (waited " +
                      std::to_string(st.unavailable_wait.count()) + " ms)";
    if (p.attempts > 0) why += "; the last attempt failed with " + p.last_error.to_string();
    return respond_error(st, req_id, make_error(ErrorCode::unknown_peer, why));
  }
  a.decode = decode->id;
  a.decode_inc = decode->incarnation;
  a.prefill = prefill->id;
  a.prefill_inc = prefill->incarnation;
  a.encoder = encoder->id;
  a.encoder_inc = encoder->incarnation;
  ++p.attempts;
  p.current = a;
  st.room_to_request[a.room] = req_id;
  for (const auto* id : {&a.encoder, &a.prefill, &a.decode})
    if (!id->empty()) ++st.inflight[*id];

  protocol::Submit s;
  s.room = a.room;
  s.attempt = p.attempts;
  s.prompt = p.prompt;
  s.image_tokens = p.image_tokens;
  s.max_tokens = p.request.max_tokens;
  s.encoder = a.encoder;
  s.prefill = a.prefill;
  s.decode = a.decode;
  // Decode first: its BOOTSTRAP is usually what prefill waits for longest.
  st.ctx.bridge->send(a.decode, s);
  if (!a.encoder.empty()) {
    protocol::Submit e = s;
    e.image = p.request.image_ppm;
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
  if (protocol::is_retryable(e.code) && p.attempts < max_attempts) {
    spdlog::info("router: room {} failed ({}); retrying (attempt {}/{})", p.current.room, e.to_string(),
                 p.attempts + 1, max_attempts);
    ++st.stats.retries;
    ++st.stats.retry_causes[std::string(protocol::error_name(e.code))];
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

void on_result(RouterState& st, const Envelope& env, protocol::RoomResult& res) {
  auto rit = st.room_to_request.find(res.room);
  if (rit == st.room_to_request.end()) return;  // a finished or superseded attempt
  const uint64_t req_id = rit->second;
  Pending& p = st.requests.at(req_id);
  if (res.ok) {
    if (env.sender != p.current.decode) return;
    const auto now = kernel::DeadlineTimer::now(st.self);
    GenerateResponse r;
    r.tokens = std::move(res.tokens);
    r.text = model::decode_text(r.tokens);
    r.room = res.room;
    r.attempts = p.attempts;
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
    p.promise.deliver(std::move(r));
    release_attempt(st, p.current);
    st.requests.erase(req_id);
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
                    " ms (room " + std::to_string(it->second.current.room) + ", attempt " +
                    std::to_string(it->second.attempts) + ")";
  if (it->second.attempts > 1)
    why += "; the previous attempt failed with " + it->second.last_error.to_string();
  respond_error(s, id, make_error(ErrorCode::timeout, why));
}

// Requests share one timeout and are kept in arrival order (ids grow), so the first is the next to expire.
void arm_timeout(RouterState& st) {
  if (st.requests.empty()) return;
  st.deadline.arm(st.self, st.requests.begin()->second.started + st.ctx.cluster->cluster.request_timeout);
}

void on_tokens(RouterState& st, const Envelope&, protocol::Tokens& t) {
  auto rit = st.room_to_request.find(t.room);
  if (rit == st.room_to_request.end()) return;
  auto& a = st.requests.at(rit->second).current;
  if (!a.first_token) a.first_token = kernel::DeadlineTimer::now(st.self);
}

using Table = kernel::MessageTable<RouterState>;

caf::behavior router(caf::stateful_actor<RouterState>* self, RoleContext ctx,
                     kernel::TablePtr<RouterState> table, std::chrono::milliseconds unavailable_wait) {
  kernel::start(self, std::move(ctx)).unavailable_wait = unavailable_wait;
  return kernel::role_behavior(self, table,
                               {
                                   [=](generate_atom, GenerateRequest& req) -> caf::response_promise {
                                     auto& s = self->state;
                                     ++s.stats.requests;
                                     auto promise = self->make_response_promise();
                                     auto bad_request = [&](std::string why) {
                                       GenerateResponse bad;
                                       bad.http_status = 400;
                                       bad.error_code = "invalid_request";
                                       bad.error = std::move(why);
                                       ++s.stats.failed;
                                       promise.deliver(std::move(bad));
                                       return promise;
                                     };
                                     std::optional<model::ImageDims> dims;
                                     if (!req.image_ppm.empty()) {
                                       auto image = model::parse_ppm(req.image_ppm);
                                       if (!image) return bad_request("image: " + image.error().detail);
                                       dims = model::ImageDims{image->width, image->height};
                                     }
                                     auto prompt = model::build_prompt(s.ctx.model, req.prompt, dims);
                                     if (!prompt) return bad_request(prompt.error().detail);
                                     const uint64_t id = s.next_request++;
                                     Pending p;
                                     p.promise = promise;
                                     p.request = std::move(req);
                                     p.prompt = std::move(prompt.value());
                                     p.image_tokens = model::count_image_tokens(p.prompt);
                                     p.started = kernel::DeadlineTimer::now(self);
                                     s.requests.emplace(id, std::move(p));
                                     start_attempt(s, id);
                                     arm_timeout(s);
                                     return promise;
                                   },
                                   [=](retry_atom, uint64_t id) {
                                     auto& s = self->state;
                                     auto it = s.requests.find(id);
                                     if (it != s.requests.end() && it->second.current.room == 0)
                                       start_attempt(s, id);
                                   },
                                   [=](stats_atom) {
                                     const auto& s = self->state;
                                     RouterStats out = s.stats;
                                     out.tables = {{"requests", s.requests.size()},
                                                   {"rooms", s.room_to_request.size()},
                                                   {"instances_in_flight", s.inflight.size()},
                                                   {"timeout_timers", s.deadline.armed() ? 1 : 0}};
                                     return out;
                                   },
                                   [=](timeout_atom) {
                                     auto& s = self->state;
                                     s.deadline.fired();
                                     const auto now = kernel::DeadlineTimer::now(self);
                                     while (!s.requests.empty() && now - s.requests.begin()->second.started >=
                                                                       s.ctx.cluster->cluster.request_timeout)
                                       time_out(s, s.requests.begin()->first);
                                     arm_timeout(s);
                                   },
                                   [=](PeerChanges& pc) {
                                     for (const auto& c : pc.changes)
                                       if (c.old_incarnation != 0) on_instance_lost(self->state, c);
                                   },
                               });
}

// RouterService on top of the router actor, for the HTTP threads.
class ActorRouterService final : public RouterService {
 public:
  ActorRouterService(caf::actor_system& system, caf::actor router, std::shared_ptr<RegistryView> registry,
                     std::chrono::milliseconds timeout)
      : system_(system), router_(std::move(router)), registry_(std::move(registry)), timeout_(timeout) {}

  GenerateResponse generate(const GenerateRequest& request) override {
    caf::scoped_actor self{system_};
    GenerateResponse out;
    self->request(router_, timeout_ + std::chrono::seconds(5), generate_atom::value, request)
        .receive([&](GenerateResponse& r) { out = std::move(r); },
                 [&](caf::error& e) {
                   out.http_status = 504;
                   out.error_code = "timeout";
                   out.error = "router did not answer: " + system_.render(e);
                 });
    return out;
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
      v.load = e.info.load;
      v.last_seen_ms =
          uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(now - e.last_seen).count());
      out.push_back(std::move(v));
    }
    return out;
  }

  RouterStats stats() override {
    caf::scoped_actor self{system_};
    RouterStats out;
    self->request(router_, std::chrono::seconds(5), stats_atom::value)
        .receive([&](RouterStats& s) { out = s; }, [&](caf::error&) {});
    return out;
  }

  bool healthy() override { return true; }

 private:
  caf::actor_system& system_;
  caf::actor router_;
  std::shared_ptr<RegistryView> registry_;
  std::chrono::milliseconds timeout_;
};

// Owns the HTTP server for the router's lifetime; stopped when the router actor terminates.
struct HttpFront {
  std::unique_ptr<ActorRouterService> service;
  std::unique_ptr<HttpApi> api;
};

protocol::Result<RoleHandle> spawn_router(RoleContext& ctx, RouterSettings settings) {
  if (!ctx.registry)
    return make_error(ErrorCode::config_error, "router '" + ctx.instance->id +
                                                   "' must host the registry ([cluster] registry = \"" +
                                                   ctx.instance->id + "\")");
  HttpApiConfig http_config;
  http_config.generate.max_tokens_limit = settings.max_tokens_limit;
  auto table = std::make_shared<Table>();
  table->on<protocol::Tokens>(on_tokens).on<protocol::RoomResult>(on_result);
  auto main =
      kernel::spawn_main(ctx, router, kernel::TablePtr<RouterState>(table), settings.unavailable_wait);
  if (!main) return main.error();
  RoleHandle h{*main, std::nullopt, 0, {}};
  auto front = std::make_shared<HttpFront>();
  front->service = std::make_unique<ActorRouterService>(*ctx.system, h.main, ctx.registry,
                                                        ctx.cluster->cluster.request_timeout);
  front->api = std::make_unique<HttpApi>(*front->service, http_config);
  auto bound = front->api->start(settings.http_host, settings.http_port);
  if (!bound) {
    caf::anon_send_exit(h.main, caf::exit_reason::user_shutdown);
    return bound.error();
  }
  spdlog::info("router: HTTP API on http://{}:{}", settings.http_host, *bound);
  h.main->attach_functor([front] { front->api->stop(); });
  return h;
}

// http = "HOST:PORT" (port 0: any free port).
protocol::Status read_http(const RoleContext&, const config::Settings& cfg, RouterSettings& out) {
  auto http = cfg.get_string("http", out.http_host + ":" + std::to_string(out.http_port));
  if (!http) return http.error();
  const auto colon = http->rfind(':');
  uint64_t port = 70000;
  try {
    if (colon != std::string::npos) port = std::stoul(http->substr(colon + 1));
  } catch (...) {
  }
  if (colon == std::string::npos || port > 65535)
    return make_error(ErrorCode::config_error,
                      cfg.where() + ": key 'http' must be HOST:PORT, got '" + *http + "'");
  out.http_host = http->substr(0, colon);
  out.http_port = uint16_t(port);
  return {};
}

}  // namespace

RoleSpec router_role_spec() {
  kernel::SettingsSchema<RouterSettings> settings;
  settings.add({"http"}, read_http)
      .u32("max_tokens_limit", &RouterSettings::max_tokens_limit, 1, 1u << 20)
      .ms("unavailable_wait_ms", &RouterSettings::unavailable_wait);
  return kernel::make_role_spec(
      "router", "HTTP front door; places rooms on encoder/prefill/decode instances and retries failures",
      false, std::move(settings), spawn_router);
}

}  // namespace epd::actors
