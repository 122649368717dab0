#include "openai_support.hpp"

#include <catch2/catch.hpp>
#include <fstream>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>

namespace epd::testing {

CommandResult run_command(const std::vector<std::string>& argv) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    ::close(fds[1]);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    _exit(127);
  }
  ::close(fds[1]);
  CommandResult r;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    r.output.append(buf, size_t(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string node_sdk_dir() {
  return std::string(EPD_SOURCE_DIR) + "/tests/http/node";
}

OracleGreedy llama_cpp_greedy_with_leads(const std::string& gguf, const std::string& work_dir,
                                         const std::vector<uint32_t>& prompt, int n) {
  const std::string spec_file = work_dir + "/oracle.json";
  std::ofstream(spec_file) << nlohmann::json{{"model", gguf}, {"prompt", prompt}, {"generate", n}}.dump();
  const auto r = run_command({"timeout", "120", "node", node_sdk_dir() + "/llama_oracle.mjs", spec_file});
  INFO(r.output.substr(0, 2000));
  REQUIRE(r.exit_code == 0);
  const auto start = r.output.find("{\"prompt_logits\"");
  REQUIRE(start != std::string::npos);
  const auto j = nlohmann::json::parse(r.output.substr(start));
  OracleGreedy out;
  out.tokens = j["greedy"].get<std::vector<uint32_t>>();
  for (const auto& l : j["greedy_leads"]) {
    out.lead.push_back(l[0].get<double>());
    out.largest.push_back(l[1].get<double>());
  }
  return out;
}

std::vector<uint32_t> llama_cpp_greedy(const std::string& gguf, const std::string& work_dir,
                                       const std::vector<uint32_t>& prompt, int n) {
  return llama_cpp_greedy_with_leads(gguf, work_dir, prompt, n).tokens;
}

std::string node_sdk_missing() {
  const std::string fix = "; run scripts/setup-deps (it installs node and runs npm ci in tests/http/node)";
  if (run_command({"node", "--version"}).exit_code != 0) return "node is not installed" + fix;
  if (!std::filesystem::exists(node_sdk_dir() + "/node_modules/openai/package.json"))
    return "the OpenAI SDK is not installed in " + node_sdk_dir() + "/node_modules" + fix;
  return "";
}

Reference reference(const std::string& prompt, int max_tokens, const std::string& image, const Sampling& s) {
  std::vector<std::string> argv = {std::string(EPD_BIN_DIR) + "/epd-run",
                                   "--preset",
                                   "tiny",
                                   "--json",
                                   "--prompt",
                                   prompt,
                                   "--max-tokens",
                                   std::to_string(max_tokens)};
  if (!image.empty()) argv.insert(argv.end(), {"--image", image});
  if (s.temperature > 0) argv.insert(argv.end(), {"--temperature", std::to_string(s.temperature)});
  if (s.top_p) argv.insert(argv.end(), {"--top-p", std::to_string(*s.top_p)});
  if (s.top_k) argv.insert(argv.end(), {"--top-k", std::to_string(*s.top_k)});
  if (s.min_p) argv.insert(argv.end(), {"--min-p", std::to_string(*s.min_p)});
  for (const auto& [id, bias] : s.logit_bias)
    argv.insert(argv.end(), {"--logit-bias", std::to_string(id) + "=" + std::to_string(bias)});
  if (s.presence_penalty)
    argv.insert(argv.end(), {"--presence-penalty", std::to_string(*s.presence_penalty)});
  if (s.frequency_penalty)
    argv.insert(argv.end(), {"--frequency-penalty", std::to_string(*s.frequency_penalty)});
  if (s.repetition_penalty)
    argv.insert(argv.end(), {"--repetition-penalty", std::to_string(*s.repetition_penalty)});
  if (s.seed) argv.insert(argv.end(), {"--seed", std::to_string(*s.seed)});
  if (s.logprobs) argv.insert(argv.end(), {"--logprobs", std::to_string(*s.logprobs)});
  const auto j = epd_run_json(argv);
  return {j["tokens"].get<std::vector<int>>(), j.value("prompt_tokens", 0),
          j.value("logprobs", nlohmann::json())};
}

nlohmann::json epd_run_json(const std::vector<std::string>& argv) {
  const auto r = run_command(argv);
  if (r.exit_code != 0) throw std::runtime_error("epd-run failed: " + r.output);
  // --json prints one object on its own line; anything else on the output is a log line.
  nlohmann::json out;
  for (size_t pos = 0; pos < r.output.size();) {
    const size_t end = r.output.find('\n', pos);
    const auto j = nlohmann::json::parse(r.output.substr(pos, end - pos), nullptr, false);
    pos = end == std::string::npos ? r.output.size() : end + 1;
    if (j.is_object() && j.contains("tokens")) out = j;
  }
  if (!out.is_object()) throw std::runtime_error("epd-run printed no tokens: " + r.output);
  return out;
}

nlohmann::json sampling_body(const Sampling& s) {
  nlohmann::json j = {{"temperature", s.temperature}};
  if (s.top_p) j["top_p"] = *s.top_p;
  if (s.top_k) j["top_k"] = *s.top_k;
  if (s.min_p) j["min_p"] = *s.min_p;
  if (!s.logit_bias.empty()) {
    j["logit_bias"] = nlohmann::json::object();
    for (const auto& [id, bias] : s.logit_bias) j["logit_bias"][std::to_string(id)] = bias;
  }
  if (s.presence_penalty) j["presence_penalty"] = *s.presence_penalty;
  if (s.frequency_penalty) j["frequency_penalty"] = *s.frequency_penalty;
  if (s.repetition_penalty) j["repetition_penalty"] = *s.repetition_penalty;
  if (s.seed) j["seed"] = *s.seed;
  return j;
}

SseEvents split_sse(const std::string& body) {
  SseEvents out;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) {
      out.error = "the stream does not end with a blank line: " + body.substr(pos, 200);
      return out;
    }
    const std::string event = body.substr(pos, end - pos);
    if (event.rfind("data: ", 0) != 0 || event.find('\n') != std::string::npos) {
      out.error = "an event that is not one `data: ` line: " + event.substr(0, 200);
      return out;
    }
    out.data.push_back(event.substr(6));
    pos = end + 2;
  }
  return out;
}

}  // namespace epd::testing
