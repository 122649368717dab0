#pragma once
// A stand-in OpenAI chat server for epd-bench serve's tests: it records every request's messages and
// streams an answer that names the history (split over several content events, with a character that
// needs JSON escaping and a non-ASCII one), so a test can check which history each turn carried.
#include <httplib.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace epd::testing {

class RecordingServer {
 public:
  RecordingServer() {
    server_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"recorder","object":"model"}]})", "application/json");
    });
    server_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      const auto body = nlohmann::json::parse(req.body, nullptr, false);
      if (!body.is_object() || !body.contains("messages")) {
        res.status = 400;
        return;
      }
      // The same history always gets the same answer, as from a greedy model.
      const std::string answer = "answer " +
                                 std::to_string(std::hash<std::string>{}(body["messages"].dump()) % 100000) +
                                 " \"to\" " + std::to_string(body["messages"].size()) + " messages \xc3\xa9";
      {
        std::lock_guard lock(mutex_);
        requests_.push_back({body["messages"], answer});
      }
      // Usage: 10 prompt tokens per message, so a turn's history shows in its prompt_tokens.
      const size_t prompt_tokens = 10 * body["messages"].size();
      auto chunk = [](const nlohmann::json& delta) {
        return "data: " + nlohmann::json{{"choices", {{{"index", 0}, {"delta", delta}}}}}.dump() + "\n\n";
      };
      std::string sse = chunk({{"role", "assistant"}});
      for (size_t at = 0; at < answer.size();) {
        size_t end = std::min(answer.size(), at + 9);
        while (end < answer.size() && (uint8_t(answer[end]) & 0xc0) == 0x80) ++end;  // whole characters
        sse += chunk({{"content", answer.substr(at, end - at)}});
        at = end;
      }
      sse += "data: " +
             nlohmann::json{{"choices", nlohmann::json::array()},
                            {"usage", {{"prompt_tokens", prompt_tokens}, {"completion_tokens", 4}}}}
                 .dump() +
             "\n\ndata: [DONE]\n\n";
      res.set_content(sse, "text/event-stream");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::yield();  // else stop() could come before listening
  }
  ~RecordingServer() {
    server_.stop();
    thread_.join();
  }
  RecordingServer(const RecordingServer&) = delete;
  RecordingServer& operator=(const RecordingServer&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  struct Request {
    nlohmann::json messages;
    std::string answer;  // what this server streamed back
  };
  std::vector<Request> requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  mutable std::mutex mutex_;
  std::vector<Request> requests_;
};

}  // namespace epd::testing
