#include "epd/launcher/readiness.hpp"

#include <httplib.h>

#include <charconv>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

namespace epd::launcher {

using protocol::ErrorCode;
using protocol::make_error;

protocol::Result<HostPort> parse_host_port(std::string_view text) {
  std::string_view t = text;
  if (t.starts_with("http://")) t.remove_prefix(7);
  auto colon = t.rfind(':');
  if (colon == std::string_view::npos || colon == 0)
    return make_error(ErrorCode::config_error, "expected host:port, got '" + std::string(text) + "'");
  unsigned port = 0;
  auto digits = t.substr(colon + 1);
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  if (ec != std::errc() || end != digits.data() + digits.size() || port == 0 || port > 65535)
    return make_error(ErrorCode::config_error, "bad port in '" + std::string(text) + "'");
  HostPort out;
  out.host = std::string(t.substr(0, colon));
  out.port = uint16_t(port);
  return out;
}

Readiness evaluate_instances(std::string_view json_body, const std::vector<std::string>& expected) {
  Readiness r;
  auto doc = nlohmann::json::parse(json_body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_object() && doc.contains("instances")) doc = doc["instances"];
  if (!doc.is_array()) {
    r.error = "GET /v1/instances did not return a JSON array";
    r.missing = expected;
    return r;
  }
  std::set<std::string> healthy;
  for (const auto& e : doc) {
    if (!e.is_object()) continue;
    auto id = e.find("id");
    auto ok = e.find("healthy");
    if (id != e.end() && id->is_string() && ok != e.end() && ok->is_boolean() && ok->get<bool>()) {
      healthy.insert(id->get<std::string>());
      if (auto inc = e.find("incarnation"); inc != e.end() && inc->is_number_unsigned())
        r.incarnations[id->get<std::string>()] = inc->get<uint64_t>();
    }
  }
  r.answered = true;
  for (const auto& id : expected)
    if (!healthy.count(id)) r.missing.push_back(id);
  return r;
}

protocol::Result<std::string> first_api_key(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return make_error(ErrorCode::config_error, "api_keys_file " + file.string() + ": cannot be read");
  for (std::string line; std::getline(in, line);) {
    const auto begin = line.find_first_not_of(" \t\r");
    if (begin == std::string::npos || line[begin] == '#') continue;
    const auto end = line.find_last_not_of(" \t\r");
    return line.substr(begin, end - begin + 1);
  }
  return make_error(ErrorCode::config_error, "api_keys_file " + file.string() + ": holds no key");
}

Readiness probe_instances(const HostPort& router, const std::vector<std::string>& expected,
                          std::chrono::milliseconds timeout) {
  const std::string scheme = router.ca_file.empty() ? "http://" : "https://";
  httplib::Client client(scheme + router.host + ":" + std::to_string(router.port));
  if (!router.ca_file.empty()) client.set_ca_cert_path(router.ca_file);
  if (!router.api_key.empty()) client.set_bearer_token_auth(router.api_key);
  auto sec = time_t(timeout.count() / 1000);
  auto usec = time_t((timeout.count() % 1000) * 1000);
  client.set_connection_timeout(sec, usec);
  client.set_read_timeout(sec, usec);
  client.set_write_timeout(sec, usec);
  auto res = client.Get("/v1/instances");
  if (!res) {
    Readiness r;
    r.error = "router " + router.host + ":" + std::to_string(router.port) +
              " not answering (httplib error: " + httplib::to_string(res.error()) + ")";
    r.missing = expected;
    return r;
  }
  if (res->status != 200) {
    Readiness r;
    r.error = "GET /v1/instances returned HTTP " + std::to_string(res->status);
    if (res->status == 401 || res->status == 403) {
      r.refused = true;
      r.error +=
          router.api_key.empty()
              ? ": the router requires an API key and its instance has no api_keys_file to take one from"
              : ": the router refused the first key of its own api_keys_file";
    }
    r.missing = expected;
    return r;
  }
  return evaluate_instances(res->body, expected);
}

}  // namespace epd::launcher
