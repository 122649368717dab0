// The OpenAI streams' raw framing as curl -N sees it (what every SSE client relies on), the health routes,
// and a short `epd-bench serve` run against the real router.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "cluster.hpp"
#include "openai_support.hpp"

using namespace epd::testing;
using nlohmann::json;

namespace {

struct Reply {
  int status = 0;
  std::string headers;  // lower-cased
  std::string body;
};

// `curl -N`: no buffering, so the events are seen as sent.
Reply curl(const Cluster& c, const std::string& path, const std::string& body = "") {
  std::vector<std::string> argv = {"curl", "-sS", "-N", "--http1.1", "-D", "-", "--max-time", "60"};
  if (!body.empty()) argv.insert(argv.end(), {"-H", "Content-Type: application/json", "--data-binary", body});
  argv.push_back("http://127.0.0.1:" + std::to_string(c.http_port()) + path);
  const auto r = run_command(argv);
  Reply out;
  const size_t split = r.output.find("\r\n\r\n");
  if (r.exit_code != 0 || split == std::string::npos) {
    out.body = r.output;
    return out;
  }
  out.headers = r.output.substr(0, split + 2);
  for (auto& ch : out.headers) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  out.body = r.output.substr(split + 4);
  out.status = std::stoi(out.headers.substr(out.headers.find(' ') + 1, 3));
  return out;
}

std::string header(const Reply& r, const std::string& name) {
  const size_t at = r.headers.find("\r\n" + name + ":");
  if (at == std::string::npos) return "";
  const size_t from = at + name.size() + 3, end = r.headers.find("\r\n", from);
  std::string v = r.headers.substr(from, end - from);
  while (!v.empty() && v.front() == ' ') v.erase(0, 1);
  return v;
}

// One stream's framing: content type, `data: {json}\n\n` events, a finish chunk carrying epd, usage last,
// `data: [DONE]` at the end.
void check_stream(const Reply& r, bool chat) {
  INFO(r.headers << r.body);
  REQUIRE(r.status == 200);
  CHECK(header(r, "content-type").rfind("text/event-stream", 0) == 0);
  CHECK(!header(r, "x-request-id").empty());
  const auto ev = split_sse(r.body);
  INFO(ev.error);
  REQUIRE(ev.error.empty());
  REQUIRE(ev.data.size() >= 3);
  CHECK(ev.data.back() == "[DONE]");
  std::vector<json> chunks;
  for (size_t i = 0; i + 1 < ev.data.size(); ++i) {
    chunks.push_back(json::parse(ev.data[i], nullptr, false));
    REQUIRE(chunks.back().is_object());
    CHECK(chunks.back()["object"] == (chat ? "chat.completion.chunk" : "text_completion"));
  }
  if (chat) CHECK(chunks.front()["choices"][0]["delta"]["role"] == "assistant");
  CHECK(chunks.back()["choices"].empty());  // include_usage: the usage chunk comes last, without choices
  CHECK(chunks.back()["usage"]["completion_tokens"].is_number_integer());
  size_t finishes = 0;
  for (const auto& c : chunks)
    if (!c["choices"].empty() && c["choices"][0]["finish_reason"].is_string()) {
      ++finishes;
      CHECK(c["epd"]["first_token_ms"].is_number());
    }
  CHECK(finishes == 1);
}

// The model the router serves (requests naming another one are refused).
std::string served_model(const Cluster& c) {
  const auto j = json::parse(curl(c, "/v1/models").body, nullptr, false);
  return j.is_object() && !j["data"].empty() ? j["data"][0]["id"].get<std::string>() : "";
}

}  // namespace

TEST_CASE("curl -N: chat and completions streams are framed as SSE, ending with DONE",
          "[e2e][multiproc][openai]") {
  Cluster cluster(ClusterSpec{});
  cluster.start();
  const json stream_options = {{"include_usage", true}};
  const std::string model = served_model(cluster);
  check_stream(curl(cluster, "/v1/chat/completions",
                    json{{"model", model},
                         {"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                         {"max_tokens", 6},
                         {"stream", true},
                         {"stream_options", stream_options}}
                        .dump()),
               true);
  check_stream(curl(cluster, "/v1/completions",
                    json{{"model", model},
                         {"prompt", "Hello"},
                         {"max_tokens", 6},
                         {"stream", true},
                         {"stream_options", stream_options}}
                        .dump()),
               false);
}

TEST_CASE("curl: health routes and the model list", "[e2e][multiproc][openai]") {
  Cluster cluster(ClusterSpec{});
  cluster.start();
  CHECK(curl(cluster, "/health/live").status == 200);
  CHECK(curl(cluster, "/health/ready").status == 200);
  const auto models = curl(cluster, "/v1/models");
  INFO(models.body);
  REQUIRE(models.status == 200);
  const auto j = json::parse(models.body, nullptr, false);
  CHECK(j["object"] == "list");
  CHECK(j["data"].size() >= 1);
}

TEST_CASE("epd-bench serve: a short run against the router, every request answered and measured",
          "[e2e][multiproc][openai]") {
  Cluster cluster(ClusterSpec{});
  cluster.start();
  const auto out =
      std::filesystem::temp_directory_path() / ("epd-serve-" + std::to_string(::getpid()) + ".json");
  const std::string url = "http://127.0.0.1:" + std::to_string(cluster.http_port());
  const std::string png = std::string(EPD_SOURCE_DIR) + "/tests/http/node/fixtures/checker.png";
  struct Run {
    std::vector<std::string> flags;
    bool streamed;
  };
  const std::vector<Run> runs = {
      {{"--endpoint", "chat", "--image", png, "--image-fraction", "0.5"}, true},
      {{"--endpoint", "completions"}, true},
      {{"--endpoint", "completions", "--no-stream"}, false},
  };
  for (const auto& run : runs) {
    std::vector<std::string> argv = {std::string(EPD_BIN_DIR) + "/epd-bench",
                                     "serve",
                                     "--url",
                                     url,
                                     "--requests",
                                     "24",
                                     "--rate",
                                     "50",
                                     "--max-concurrency",
                                     "8",
                                     "--prompt-len",
                                     "32",
                                     "--prompt-len-range",
                                     "0.5",
                                     "--output-len",
                                     "8",
                                     "--quiet",
                                     "--json",
                                     out.string()};
    argv.insert(argv.end(), run.flags.begin(), run.flags.end());
    const auto r = run_command(argv);
    INFO(r.output);
    CHECK(r.exit_code == 0);
    const auto j = json::parse(std::ifstream(out), nullptr, false);
    REQUIRE(j.is_object());
    const auto& s = j["summary"];
    CHECK(s["ok"] == 24);
    CHECK(s["failed"] == 0);
    CHECK(s["ttft_ms"]["n"] == 24);
    CHECK(s["overhead_ms"]["n"] == 24);  // every answer carried epd.first_token_ms
    CHECK(s["output_tokens"].get<int>() > 0);
    if (run.streamed) CHECK(s["itl_ms"]["n"].get<int>() > 0);
  }
  std::filesystem::remove(out);
  CHECK(cluster.wait_all_free().size() == 4);
}

TEST_CASE("epd-bench serve: a burst over the router's limit is counted as 429 errors by code",
          "[e2e][multiproc][openai]") {
  ClusterSpec spec;
  spec.defaults["router"] = "max_in_flight = 1\nmax_queued = 0\n";
  Cluster cluster(spec);
  cluster.start();
  const auto out =
      std::filesystem::temp_directory_path() / ("epd-serve-429-" + std::to_string(::getpid()) + ".json");
  const auto r = run_command({std::string(EPD_BIN_DIR) + "/epd-bench", "serve", "--url",
                              "http://127.0.0.1:" + std::to_string(cluster.http_port()), "--requests", "16",
                              "--rate", "inf", "--output-len", "64", "--quiet", "--json", out.string()});
  INFO(r.output);
  CHECK(r.exit_code == 1);  // some requests failed
  const auto j = json::parse(std::ifstream(out), nullptr, false);
  std::filesystem::remove(out);
  REQUIRE(j.is_object());
  const auto& s = j["summary"];
  CHECK(s["ok"].get<int>() >= 1);
  CHECK(s["ok"].get<int>() + s["failed"].get<int>() == 16);
  size_t refused = 0;
  for (const auto& [key, n] : s["errors"].items()) {
    CHECK(key.rfind("429 ", 0) == 0);
    refused += n.get<size_t>();
  }
  CHECK(refused == s["failed"].get<size_t>());
  CHECK(refused >= 1);
}
