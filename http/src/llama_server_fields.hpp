#pragma once
// llama-server's own request fields on the OpenAI routes. A client moving from llama-server keeps sending
// them; each is honoured, accepted where it cannot change the answer, or refused with a 400 naming it,
// never silently ignored (docs/http-api.md, "llama-server's fields").
#include <nlohmann/json.hpp>

#include "openai_fields.hpp"

namespace epd::http::openai {

// The first of `body`'s llama-server fields that epd cannot honour, or a field of the wrong type.
fields::Failure refuse_llama_server_fields(const nlohmann::json& body);

}  // namespace epd::http::openai
