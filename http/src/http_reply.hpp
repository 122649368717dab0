#pragma once
// JSON bodies of the HTTP API's replies (docs/http-api.md shows each). Text that is not valid UTF-8 (a
// byte-level model can stop mid-character) is emitted with U+FFFD replacements; token ids are exact.
#include <string>
#include <string_view>
#include <vector>

#include "epd/http/router_service.hpp"

namespace epd::http {

// `logprobs`: the request asked for them (each token's, in "logprobs").
std::string generate_reply_json(const GenerateResponse& response, bool logprobs = false);
std::string instances_json(const std::vector<InstanceView>& instances);
std::string stats_json(const RouterStats& stats);
// GET /v1/models: OpenAI's list with the one model the cluster serves.
std::string models_json(const std::string& model_id);

}  // namespace epd::http
