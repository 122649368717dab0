#pragma once
// epd-run's --tools FILE: OpenAI's "tools" array read from a file, and the answer's calls as JSON, so tests
// compare the colocated run with the cluster's /v1/chat/completions.
#include <string>
#include <vector>

#include "epd/model/chat_template.hpp"
#include "epd/model/chat_tools.hpp"
#include "epd/protocol/result.hpp"

namespace epd::run {

// [{"type": "function", "function": {"name", "description"?, "parameters"?}}, ...], keys kept in order.
protocol::Result<std::vector<model::ChatTool>> read_tools_file(const std::string& path);

// `result_json` (generate's --json object) with "tool_calls": [{"name", "arguments"}] and "content" (the
// text outside the calls) when `text` holds calls of `tools` in `format`; unchanged otherwise.
std::string with_tool_calls(const std::string& result_json, model::ToolFormat format,
                            const std::vector<model::ChatTool>& tools, const std::string& text,
                            bool parallel);

// The same for a checkpoint's chat with tools: the calls llama.cpp's parser of the rendered conversation
// reads from `text` ("content" the rest; unchanged when it reads none).
std::string with_parsed_calls(const std::string& result_json, const model::ChatAnswerParser& parser,
                              const std::string& text, bool parallel);

}  // namespace epd::run
