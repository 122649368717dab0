#pragma once
// The front door's API key check (`Authorization: Bearer <key>`), made on a request's head before any body
// byte is read. docs/http-api.md ("Authentication") shows the refusals.
#include <optional>
#include <string>
#include <vector>

#include "epd/http/api_keys.hpp"
#include "epd/http/auth_throttle.hpp"
#include "epd/http/http_request.hpp"
#include "epd/http/http_server.hpp"

namespace epd::http {

struct AuthRefusal {
  HttpError error;                  // 401 invalid_api_key, or 429 rate_limited
  std::vector<HttpHeader> headers;  // WWW-Authenticate (401) or Retry-After (429)
};

// nullopt when the request carries one of `keys`.
std::optional<AuthRefusal> check_bearer(const ApiKeys& keys, const HttpRequest& request);

// check_bearer behind `throttle`: an address cooling down after too many failures gets 429 before its key
// is looked at; a failure is counted against the request's address.
std::optional<AuthRefusal> check_bearer(const ApiKeys& keys, AuthThrottle& throttle,
                                        const HttpRequest& request);

}  // namespace epd::http
