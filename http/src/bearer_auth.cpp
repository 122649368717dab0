#include "bearer_auth.hpp"

#include <cctype>

namespace epd::http {
namespace {

bool is_bearer(std::string_view scheme) {
  constexpr std::string_view kBearer = "bearer";
  if (scheme.size() != kBearer.size()) return false;
  for (size_t i = 0; i < scheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(scheme[i])) != kBearer[i]) return false;
  return true;
}

AuthRefusal refuse(std::string message, std::string challenge) {
  // OpenAI answers a missing key with code null and a wrong one with invalid_api_key; epd's codes are
  // always strings, so both say invalid_api_key and the message tells them apart.
  return {{401, "invalid_api_key", std::move(message)}, {{"WWW-Authenticate", std::move(challenge)}}};
}

}  // namespace

std::optional<AuthRefusal> check_bearer(const ApiKeys& keys, const HttpRequest& request) {
  auto header = request.header("Authorization");
  if (!header || header->empty()) {
    // Anthropic's clients send the key as X-Api-Key; the same keys answer it.
    if (auto key = request.header("X-Api-Key"); key && !key->empty()) {
      if (!keys.accepts(*key))
        return refuse("Incorrect API key provided.", R"(Bearer realm="epd", error="invalid_token")");
      return std::nullopt;
    }
    return refuse(
        "You didn't provide an API key. Send it in an Authorization header using Bearer auth "
        "(Authorization: Bearer YOUR_KEY) or as X-Api-Key.",
        R"(Bearer realm="epd")");
  }
  std::string_view v = *header;
  const size_t space = v.find(' ');
  std::string_view token = space == std::string_view::npos ? std::string_view{} : v.substr(space + 1);
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  if (space == std::string_view::npos || !is_bearer(v.substr(0, space)) || token.empty())
    return refuse("The Authorization header must be \"Bearer YOUR_KEY\".",
                  R"(Bearer realm="epd", error="invalid_request")");
  // The key is never echoed back (OpenAI shows part of it): the reply may be logged or shown to others.
  if (!keys.accepts(token))
    return refuse("Incorrect API key provided.", R"(Bearer realm="epd", error="invalid_token")");
  return std::nullopt;
}

std::optional<AuthRefusal> check_bearer(const ApiKeys& keys, AuthThrottle& throttle,
                                        const HttpRequest& request) {
  const std::string_view address = remote_address(request.remote);
  if (const uint32_t wait = throttle.blocked_for(address))
    return AuthRefusal{{429, "rate_limited",
                        "Too many requests with a missing or wrong API key from this address; retry in " +
                            std::to_string(wait) + " s."},
                       {{"Retry-After", std::to_string(wait)}}};
  auto refusal = check_bearer(keys, request);
  if (refusal) throttle.failed(address);
  return refusal;
}

}  // namespace epd::http
