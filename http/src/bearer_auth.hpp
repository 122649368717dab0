#pragma once
// The front door's API key check (`Authorization: Bearer <key>`), made on a request's head before any body
// byte is read. docs/http-api.md ("Authentication") shows the refusals.
#include <optional>
#include <string>

#include "epd/http/api_keys.hpp"
#include "epd/http/http_request.hpp"
#include "epd/http/http_server.hpp"

namespace epd::http {

struct AuthRefusal {
  HttpError error;        // 401, code invalid_api_key
  std::string challenge;  // the WWW-Authenticate header's value
};

// nullopt when the request carries one of `keys`.
std::optional<AuthRefusal> check_bearer(const ApiKeys& keys, const HttpRequest& request);

}  // namespace epd::http
