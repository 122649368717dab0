#include "epd/etcd/etcd_client.hpp"

#include <charconv>

#include "etcd_json.hpp"
#include "http_post.hpp"

namespace epd::etcd {

using detail::b64;
using detail::int64_field;
using nlohmann::json;
using protocol::ErrorCode;
using protocol::make_error;

namespace {

constexpr int kUnavailable = 14;  // gRPC: this member cannot serve (no leader, stopping): ask another
// Kept-alive connections per endpoint: an instance's lease renewals and registrations, a router's listings.
constexpr size_t kIdleConnectionsPerEndpoint = 4;

Result<json> parse_answer(const std::string& body) {
  auto j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return make_error(ErrorCode::malformed_body, "etcd answer is not a JSON object: " + body.substr(0, 200));
  if (auto err = detail::etcd_error(j)) return make_error(ErrorCode::invalid_request, *err);
  return j;
}

Result<int64_t> header_revision(const json& answer) {
  auto it = answer.find("header");
  if (it == answer.end()) return make_error(ErrorCode::malformed_body, "etcd answer has no header");
  return int64_field(*it, "revision");
}

}  // namespace

Result<Endpoint> parse_endpoint(std::string_view url) {
  auto bad = [&](const std::string& why) {
    return make_error(ErrorCode::config_error,
                      "etcd endpoint '" + std::string(url) + "': " + why + " (expected http://HOST:PORT)");
  };
  constexpr std::string_view scheme = "http://";
  if (url.substr(0, scheme.size()) != scheme) return bad("not http://");
  std::string_view rest = url.substr(scheme.size());
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return bad("no HOST:PORT");
  if (rest.find('/') != std::string_view::npos) return bad("a path is not allowed");
  Endpoint ep;
  ep.host = std::string(rest.substr(0, colon));
  std::string_view port = rest.substr(colon + 1);
  unsigned v = 0;
  auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), v);
  if (ec != std::errc() || p != port.data() + port.size() || v == 0 || v > 65535) return bad("bad port");
  ep.port = uint16_t(v);
  return ep;
}

std::string prefix_end(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (uint8_t(end.back()) < 0xff) {
      end.back() = char(uint8_t(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

struct EtcdClient::Pools {
  std::vector<std::unique_ptr<detail::HttpPool>> by_endpoint;
};

EtcdClient::EtcdClient(std::vector<Endpoint> endpoints, std::chrono::milliseconds timeout,
                       std::shared_ptr<Traffic> traffic)
    : endpoints_(std::move(endpoints)),
      timeout_(timeout),
      current_(std::make_shared<std::atomic<size_t>>(0)),
      pools_(std::make_shared<Pools>()),
      traffic_(std::move(traffic)) {
  for (const auto& ep : endpoints_)
    pools_->by_endpoint.push_back(std::make_unique<detail::HttpPool>(ep, kIdleConnectionsPerEndpoint));
}

Result<EtcdClient> EtcdClient::create(ClientOptions options) {
  if (options.endpoints.empty()) return make_error(ErrorCode::config_error, "no etcd endpoints");
  std::vector<Endpoint> eps;
  for (const auto& url : options.endpoints) {
    auto ep = parse_endpoint(url);
    if (!ep) return ep.error();
    eps.push_back(*ep);
  }
  return EtcdClient(std::move(eps), options.timeout, std::move(options.traffic));
}

std::string EtcdClient::current_endpoint() const {
  return endpoints_[*current_ % endpoints_.size()].text();
}

Result<std::string> EtcdClient::call(const std::string& path, const std::string& body) const {
  std::string errors;
  const size_t first = current_->load();
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    const size_t idx = (first + i) % endpoints_.size();
    detail::HttpPool& pool = *pools_->by_endpoint[idx];
    auto conn = pool.take();
    const uint64_t connects_before = conn->connects();
    auto reply = conn->post(path, body, timeout_);
    if (traffic_) traffic_->connections += conn->connects() - connects_before;
    pool.give_back(std::move(conn));  // a failed one holds no connection any more: the next call opens one
    if (!reply) {
      errors += (errors.empty() ? "" : "; ") + reply.error().detail;
      continue;
    }
    auto j = json::parse(reply->body, nullptr, false);
    if (!j.is_discarded() && detail::grpc_code(j) == kUnavailable) {
      errors += (errors.empty() ? "" : "; ") + endpoints_[idx].text() + ": " + *detail::etcd_error(j);
      continue;
    }
    current_->store(idx);
    if (traffic_) {
      ++traffic_->calls;
      traffic_->call_bytes += reply->body.size();
    }
    return std::move(reply->body);
  }
  return make_error(ErrorCode::peer_unreachable, "no etcd endpoint answered " + path + ": " + errors);
}

Result<Lease> EtcdClient::grant(std::chrono::seconds ttl) const {
  auto body = call("/v3/lease/grant", json{{"TTL", std::to_string(ttl.count())}}.dump());
  if (!body) return body.error();
  auto j = parse_answer(*body);
  if (!j) return j.error();
  Lease lease;
  protocol::FirstError e;
  e.take(lease.id, int64_field(*j, "ID")).take(lease.ttl_s, int64_field(*j, "TTL"));
  if (!e.status()) return e.status().error();
  if (lease.id == 0) return make_error(ErrorCode::malformed_body, "etcd granted no lease id: " + *body);
  return lease;
}

Result<int64_t> EtcdClient::keep_alive(int64_t lease) const {
  // A bidirectional stream in gRPC; through the gateway, one request and its one answer per POST.
  auto body = call("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump());
  if (!body) return body.error();
  auto j = parse_answer(*body);
  if (!j) return j.error();
  auto result = j->find("result");
  if (result == j->end()) return make_error(ErrorCode::malformed_body, "etcd keepalive: no result: " + *body);
  return int64_field(*result, "TTL");  // absent (0): the lease is gone
}

Status EtcdClient::revoke(int64_t lease) const {
  auto body = call("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump());
  if (!body) return body.error();
  auto j = parse_answer(*body);
  if (!j) return j.error();
  return {};
}

Result<int64_t> EtcdClient::put(const std::string& key, const std::string& value, int64_t lease) const {
  json req{{"key", b64(key)}, {"value", b64(value)}};
  if (lease != 0) req["lease"] = std::to_string(lease);
  auto body = call("/v3/kv/put", req.dump());
  if (!body) return body.error();
  auto j = parse_answer(*body);
  if (!j) return j.error();
  return header_revision(*j);
}

Result<int64_t> EtcdClient::erase(const std::string& key) const {
  auto body = call("/v3/kv/deleterange", json{{"key", b64(key)}}.dump());
  if (!body) return body.error();
  auto j = parse_answer(*body);
  if (!j) return j.error();
  return header_revision(*j);
}

Status EtcdClient::compact(int64_t revision) const {
  auto body = call("/v3/kv/compaction", json{{"revision", std::to_string(revision)}}.dump());
  if (!body) return body.error();
  auto j = parse_answer(*body);
  if (!j) return j.error();
  return {};
}

Result<RangeResult> EtcdClient::range_prefix(const std::string& prefix) const {
  auto body = call("/v3/kv/range", json{{"key", b64(prefix)}, {"range_end", b64(prefix_end(prefix))}}.dump());
  if (!body) return body.error();
  if (traffic_) traffic_->range_bytes += body->size();
  auto j = parse_answer(*body);
  if (!j) return j.error();
  RangeResult out;
  auto rev = header_revision(*j);
  if (!rev) return rev.error();
  out.revision = *rev;
  if (auto kvs = j->find("kvs"); kvs != j->end()) {
    if (!kvs->is_array()) return make_error(ErrorCode::malformed_body, "etcd range: kvs is not an array");
    for (const auto& kv : *kvs) {
      auto parsed = detail::parse_kv(kv);
      if (!parsed) return parsed.error();
      out.kvs.push_back(std::move(*parsed));
    }
  }
  return out;
}

}  // namespace epd::etcd
