#pragma once
// OpenAI's Responses answers: the Response object (output items: reasoning, message with output_text,
// function_call), and its streamed events (response.created, response.output_item.added,
// response.output_text.delta, response.function_call_arguments.delta, ..., response.completed), each with
// its sequence_number. Errors keep OpenAI's error shape. docs/http-api.md shows them.
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "answer.hpp"

namespace epd::http::responses {

// One answer (n = 1) as the Response "resp_<unique>", created at `created` (unix seconds), of `model`;
// `settings` are the request's as the Response repeats them (responses_request.hpp).
std::unique_ptr<AnswerShape> make_shape(std::string unique, int64_t created, std::string model,
                                        nlohmann::ordered_json settings);

}  // namespace epd::http::responses
