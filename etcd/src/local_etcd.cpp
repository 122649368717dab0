#include "epd/etcd/local_etcd.hpp"

#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "http_post.hpp"

namespace epd::etcd {

using protocol::ErrorCode;
using protocol::make_error;

protocol::Result<launcher::ChildSpec> local_etcd_child(const LocalEtcd& e) {
  if (::access(kEtcdBinary, X_OK) != 0)
    return make_error(
        ErrorCode::config_error,
        std::string(kEtcdBinary) + " is missing: scripts/setup-deps installs Debian's etcd-server");
  const std::string client = e.client.text(), peer = e.peer.text();
  return launcher::ChildSpec{
      "etcd",
      {kEtcdBinary, "--name", e.name, "--data-dir", e.data_dir.string(), "--listen-client-urls", client,
       "--advertise-client-urls", client, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
       "--initial-cluster", e.name + "=" + peer, "--log-level", "warn", "--logger", "zap"}};
}

protocol::Status wait_healthy(const Endpoint& client, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last = "no answer";
  while (std::chrono::steady_clock::now() < deadline) {
    // /health is a GET in etcd; the gateway's maintenance status answers a POST the same way once serving.
    auto r = detail::http_post(client, "/v3/maintenance/status", "{}", std::chrono::milliseconds(500));
    if (r && r->status == 200) {
      auto j = nlohmann::json::parse(r->body, nullptr, false);
      if (!j.is_discarded() && j.is_object() && j.contains("header")) return {};
      last = r->body;
    } else if (!r) {
      last = r.error().detail;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return make_error(ErrorCode::timeout, "etcd at " + client.text() + " not serving after " +
                                            std::to_string(timeout.count()) + " ms: " + last);
}

}  // namespace epd::etcd
