#pragma once
// A single-member etcd for one machine (epd-cluster's `[etcd] local = true`, and the tests): the command
// line of Debian's etcd-server listening on loopback ports, with its data in a directory the caller owns.
#include <filesystem>
#include <string>

#include "epd/etcd/endpoint.hpp"
#include "epd/launcher/child_spec.hpp"
#include "epd/protocol/result.hpp"

namespace epd::etcd {

inline constexpr const char* kEtcdBinary = "/usr/bin/etcd";

struct LocalEtcd {
  std::string name = "epd-local";
  Endpoint client;  // http://127.0.0.1:PORT: the client port (and its JSON gateway)
  Endpoint peer;    // the raft peer port (unused by a single member, but etcd binds it)
  std::filesystem::path data_dir;
};

// The launcher spec that runs it (id "etcd"); an error when etcd is not installed.
protocol::Result<launcher::ChildSpec> local_etcd_child(const LocalEtcd& etcd);

// Polls GET /health until etcd answers healthy or `timeout` passes.
protocol::Status wait_healthy(const Endpoint& client, std::chrono::milliseconds timeout);

}  // namespace epd::etcd
