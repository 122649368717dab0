#pragma once
// "Is the cluster up?": ask the router's GET /v1/instances and check that every expected instance is
// listed with "healthy": true. The router hosts the registry, so listed + healthy means registered.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "epd/protocol/result.hpp"

namespace epd::launcher {

// Where a router's HTTP API listens, and what the probe needs to be let in.
struct HostPort {
  std::string host;
  uint16_t port = 0;
  std::string api_key;  // sent as a bearer token (the router's api_keys_file); empty: none
  std::string ca_file;  // set: the router speaks TLS; its certificate is verified against this PEM file
};
// "127.0.0.1:18100" (an optional "http://" prefix is accepted).
protocol::Result<HostPort> parse_host_port(std::string_view text);

// The first key of an api_keys_file (one per line, '#' starts a comment), for the probe: the launcher is
// the operator's, and asks its own cluster. Errors name the file, never a key.
protocol::Result<std::string> first_api_key(const std::filesystem::path& file);

struct Readiness {
  bool answered = false;             // the router replied 200 with a body we understood
  bool refused = false;              // it answered 401 or 403: the key is wrong, waiting will not help
  std::string error;                 // why not, when !answered
  std::vector<std::string> missing;  // expected ids not (yet) listed as healthy
  // The incarnation of each healthy listed instance that has one (a restarted process has a new one).
  std::map<std::string, uint64_t> incarnations;
  bool ready() const { return answered && missing.empty(); }
};

// The body is a JSON array of objects with at least "id" and "healthy" (an object wrapping it as
// {"instances": [...]} is accepted too).
Readiness evaluate_instances(std::string_view json_body, const std::vector<std::string>& expected);

// One GET /v1/instances with the given connect/read timeout.
Readiness probe_instances(const HostPort& router, const std::vector<std::string>& expected,
                          std::chrono::milliseconds timeout);

}  // namespace epd::launcher
