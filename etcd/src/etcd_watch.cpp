// EtcdClient::watch_prefix: one watch stream on the current endpoint (a failed one moves the client on to
// the next endpoint, so the caller's next watch goes elsewhere).
#include "epd/etcd/etcd_client.hpp"
#include "etcd_json.hpp"
#include "http_post.hpp"

namespace epd::etcd {

using nlohmann::json;

WatchEnd EtcdClient::watch_prefix(
    const std::string& prefix, int64_t start_revision,
    const std::function<void(std::vector<WatchEvent>, int64_t revision)>& on_events,
    const std::atomic<bool>& stop, std::chrono::milliseconds idle_timeout) const {
  const size_t idx = current_->load() % endpoints_.size();
  json create{{"key", detail::b64(prefix)}, {"range_end", detail::b64(prefix_end(prefix))}};
  if (start_revision > 0) create["start_revision"] = std::to_string(start_revision);
  const std::string body = json{{"create_request", create}}.dump();

  WatchEnd end;
  auto on_line = [&](std::string_view line) -> bool {
    if (traffic_) traffic_->watch_bytes += line.size() + 1;
    auto j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      end = {WatchEnd::Why::failed, 0, "watch: not JSON: " + std::string(line.substr(0, 200)),
             end.last_revision};
      return false;
    }
    if (auto err = detail::etcd_error(j)) {
      end = {WatchEnd::Why::failed, 0, "watch: " + *err, end.last_revision};
      return false;
    }
    auto result = j.find("result");
    if (result == j.end() || !result->is_object()) return true;
    if (auto h = result->find("header"); h != result->end())
      if (auto rev = detail::int64_field(*h, "revision"); rev && *rev > end.last_revision)
        end.last_revision = *rev;
    if (result->value("canceled", false)) {
      auto compact = detail::int64_field(*result, "compact_revision");
      if (compact && *compact > 0) {
        end = {WatchEnd::Why::compacted, *compact, "", end.last_revision};
      } else {
        end = {WatchEnd::Why::failed, 0, "watch canceled: " + result->value("cancel_reason", std::string()),
               end.last_revision};
      }
      return false;
    }
    auto events = result->find("events");
    if (events == result->end()) return true;  // "created", or a progress notification
    std::vector<WatchEvent> out;
    for (const auto& ev : *events) {
      WatchEvent we;
      we.type =
          ev.value("type", std::string("PUT")) == "DELETE" ? WatchEvent::Type::del : WatchEvent::Type::put;
      auto kv = detail::parse_kv(ev.value("kv", json::object()));
      if (!kv) {
        end = {WatchEnd::Why::failed, 0, "watch: " + kv.error().detail, end.last_revision};
        return false;
      }
      we.kv = std::move(*kv);
      out.push_back(std::move(we));
    }
    if (traffic_) traffic_->watch_events += out.size();
    on_events(std::move(out), end.last_revision);
    return true;
  };
  end.why = WatchEnd::Why::stopped;
  auto streamed =
      detail::http_post_stream(endpoints_[idx], "/v3/watch", body, timeout_, idle_timeout, stop, on_line);
  using Why = detail::StreamEnd::Why;
  if (streamed.why == Why::stopped) {
    if (stop.load()) end.why = WatchEnd::Why::stopped;
    return end;  // stopped by us, or by on_line with `end` filled in
  }
  end.why = WatchEnd::Why::failed;
  end.error = streamed.error;
  if (streamed.why != Why::idle || endpoints_.size() > 1) current_->store((idx + 1) % endpoints_.size());
  return end;
}

}  // namespace epd::etcd
