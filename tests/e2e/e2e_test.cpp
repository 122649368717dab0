// The disaggregated pipeline end to end: real role processes on 127.0.0.1, requests through the router's
// HTTP API, tokens compared with the colocated reference run (the same code epd-run uses).
#include <caf/all.hpp>
#include <catch2/catch.hpp>
#include <future>
#include <zmq.hpp>

#include "cluster.hpp"
#include "epd/actors/bridge.hpp"
#include "epd/http/base64.hpp"
#include "epd/model/generate.hpp"
#include "epd/model/image.hpp"
#include "load.hpp"
#include "workload.hpp"

using namespace epd;
using epd::testing::Cluster;
using epd::testing::ClusterSpec;
using namespace epd::testing;
using nlohmann::json;

namespace {

// A clean SIGTERM shutdown of every process, without sanitizer reports (meaningful in EPD_SANITIZE builds).
void stop_cleanly(Cluster& cluster) {
  const std::string reports = cluster.stop_and_collect_sanitizer_reports();
  INFO(reports);
  CHECK(reports.empty());
}

}  // namespace

TEST_CASE("shm cluster: 20 requests, 8 in flight, tokens equal the colocated run", "[e2e][multiproc]") {
  Cluster cluster(ClusterSpec{});
  cluster.start();
  run_and_compare(cluster, 20, 8);
  // Prefill and decode share one KV layout: every page went direct, nothing was staged.
  CHECK_FALSE(cluster.instance("prefill-0").contains("staging"));
  CHECK(cluster.instance("decode-0")["staging"]["chunks"] == 0);
  stop_cleanly(cluster);
}

TEST_CASE("tcp cluster: 20 requests, 8 in flight, tokens equal the colocated run", "[e2e][multiproc]") {
  ClusterSpec spec;
  spec.backend = "tcp";
  Cluster cluster(spec);
  cluster.start();
  run_and_compare(cluster, 20, 8);
  stop_cleanly(cluster);
}

TEST_CASE("2 prefill x 2 decode cluster: load is spread and tokens are equal", "[e2e][multiproc]") {
  ClusterSpec spec;
  spec.prefills = 2;
  spec.decodes = 2;
  Cluster cluster(spec);
  cluster.start();
  run_and_compare(cluster, 24, 8);
  stop_cleanly(cluster);
}

TEST_CASE("bad HTTP requests get a 4xx with a reason and the cluster keeps serving", "[e2e][multiproc]") {
  Cluster cluster(ClusterSpec{});
  cluster.start();
  struct Bad {
    std::string body;
    int status;
    std::string needle;
  };
  const std::vector<Bad> bad = {
      {"{not json", 400, ""},
      {R"({"max_tokens": 4})", 400, "prompt"},
      {R"({"prompt": 17})", 400, "prompt"},
      {R"({"prompt": "x", "max_tokens": 0})", 400, "max_tokens"},
      {R"({"prompt": "x", "image": "@@@not base64@@@"})", 400, "base64"},
      {R"({"prompt": "x", "image": ")" + http::base64_encode(std::vector<uint8_t>{'P', '6', ' ', '9'}) +
           R"("})",
       400, "image"},
      {R"({"prompt": ")" + std::string(70000, 'a') + R"("})", 413, ""},
      {R"({"prompt": ")" + std::string(5000, 'a') + R"("})", 400, ""},  // longer than the model's max_seq
  };
  for (const auto& b : bad) {
    auto [status, body] = cluster.post_raw("/v1/generate", b.body);
    INFO(b.body.substr(0, 80) << " -> " << status << " " << body.substr(0, 300));
    CHECK(status == b.status);
    auto j = json::parse(body, nullptr, false);
    REQUIRE(j.contains("error"));
    CHECK_FALSE(j["error"]["message"].get<std::string>().empty());
    if (!b.needle.empty()) CHECK_THAT(j["error"]["message"].get<std::string>(), Catch::Contains(b.needle));
  }
  run_and_compare(cluster, 4, 2);
}

TEST_CASE("garbage and unexpected control messages are rejected and every role keeps serving",
          "[e2e][multiproc]") {
  Cluster cluster(ClusterSpec{});
  cluster.start();
  std::map<std::string, pid_t> pids;
  for (const auto& s : cluster.group().status()) pids[s.id] = s.pid;

  zmq::context_t ctx;
  for (const auto& id : cluster.ids()) {
    zmq::socket_t raw(ctx, zmq::socket_type::dealer);
    raw.set(zmq::sockopt::routing_id, "intruder");
    raw.set(zmq::sockopt::linger, 0);
    raw.set(zmq::sockopt::rcvtimeo, 3000);
    raw.connect(cluster.control_endpoint(id));
    // Garbage: answered with an ERROR.
    raw.send(zmq::str_buffer("GET / HTTP/1.1\r\n\r\n"), zmq::send_flags::none);
    zmq::message_t reply;
    REQUIRE(raw.recv(reply));
    auto err = protocol::decode({static_cast<const uint8_t*>(reply.data()), reply.size()});
    REQUIRE(err.ok());
    REQUIRE(std::holds_alternative<protocol::ErrorReply>(err->body));
    CHECK(std::get<protocol::ErrorReply>(err->body).code == protocol::ErrorCode::bad_magic);
    // Well-formed but unexpected or for rooms that do not exist: dropped with a log line, no state change.
    protocol::KvStatus kv;
    kv.room = 424242;
    kv.state = protocol::KvState::success;
    protocol::EmbedPull pull;
    pull.room = 777;
    pull.addr = 0x1000;
    pull.bytes = 64;
    protocol::EmbedDone done;
    done.room = 888;
    protocol::RoomResult result;
    result.room = 31337;
    result.ok = true;
    for (protocol::Body body : std::vector<protocol::Body>{
             kv, protocol::Watermark{1, 2}, pull, done, protocol::ChunkReady{.room = 999, .chunk = 1},
             protocol::Tokens{31337, 0, {1, 2, 3}}, result, protocol::AbortAck{5}})
      raw.send(zmq::buffer(protocol::encode({"intruder", 1, body})), zmq::send_flags::none);
  }
  run_and_compare(cluster, 6, 3);
  for (const auto& s : cluster.group().status()) {
    INFO(s.id);
    CHECK(s.pid == pids[s.id]);  // nobody crashed or restarted
    CHECK(s.state == launcher::ChildState::running);
  }
}

TEST_CASE("the echo role (docs/adding-a-role.md) runs through the generic runner", "[e2e][multiproc]") {
  ClusterSpec spec;
  const int port = epd::testing::free_port();
  spec.extra_sections =
      "[defaults.echo]\nmax_tokens = 3\n\n[[instance]]\nid = \"echo-0\"\nrole = \"echo\"\n"
      "control = \"tcp://127.0.0.1:" +
      std::to_string(port) + "\"\n";
  spec.extra_ids = {"echo-0"};
  Cluster cluster(spec);
  cluster.start();
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto me = actors::Bridge::start("tester", 1, "tcp://127.0.0.1:*");
  REQUIRE(me.ok());
  REQUIRE(me.value()->subscribe(protocol::MessageType::result, caf::actor_cast<caf::actor>(self)).ok());
  protocol::Submit s;
  s.room = 99;
  s.prompt = {10, 20, 30, 40, 50};
  me.value()->send_to_endpoint("tcp://127.0.0.1:" + std::to_string(port), s);
  // The echo answers its sender by id, which it can only reach once the tester is registered; so register.
  me.value()->send_to_endpoint(cluster.control_endpoint("router"),
                               protocol::Hello{"tester", me.value()->endpoint(), {}, {}, 0, tiny_identity()});
  std::optional<protocol::RoomResult> result;
  for (int i = 0; i < 50 && !result; ++i) {
    self->receive(
        [&](protocol::Envelope& env) {
          if (auto* r = std::get_if<protocol::RoomResult>(&env.body)) result = *r;
        },
        caf::after(std::chrono::milliseconds(200)) >>
            [&] { me.value()->send_to_endpoint("tcp://127.0.0.1:" + std::to_string(port), s); });
  }
  INFO(cluster.logs());
  REQUIRE(result);
  CHECK(result->room == 99);
  CHECK(result->tokens == std::vector<uint32_t>{50, 40, 30});
  me.value()->stop();
}

// llama-server's ignore_eos, which the serving benchmarks send to get exactly max_tokens tokens: a prompt
// whose answer ends early at the end token runs to max_tokens instead — the colocated run that does not
// stop at the end token — on the native route and the OpenAI one, streamed or not; the end token has no
// text, the finish reason is "length", and stop strings still end the answer.
TEST_CASE("ignore_eos: an answer that would end at the end token runs to max_tokens", "[e2e][multiproc]") {
  auto cfg = model::preset("tiny");
  REQUIRE(cfg.ok());
  auto runner = model::make_reference_runner(*cfg);
  REQUIRE(runner.ok());
  constexpr uint32_t kMax = 24;
  std::string prompt;
  std::vector<uint32_t> ended, full;
  for (int i = 0; i < 200 && prompt.empty(); ++i) {  // a prompt the tiny model answers in fewer tokens
    const std::string p = "ignore eos " + std::to_string(i);
    model::GenerateOptions o;
    o.max_tokens = kMax;
    auto r = model::generate(**runner, p, nullptr, o);
    REQUIRE(r.ok());
    if (!r->stopped_at_eos || r->tokens.size() >= kMax / 2) continue;
    o.stop_at_eos = false;
    auto all = model::generate(**runner, p, nullptr, o);
    REQUIRE(all.ok());
    prompt = p, ended = r->tokens, full = all->tokens;
  }
  REQUIRE_FALSE(prompt.empty());
  REQUIRE(full.size() == kMax);

  Cluster cluster(ClusterSpec{});
  cluster.start();
  const auto [s1, plain] = cluster.generate({{"prompt", prompt}, {"max_tokens", kMax}});
  REQUIRE(s1 == 200);
  CHECK(plain["tokens"].get<std::vector<uint32_t>>() == ended);
  const auto [s2, ignoring] =
      cluster.generate({{"prompt", prompt}, {"max_tokens", kMax}, {"ignore_eos", true}});
  REQUIRE(s2 == 200);
  CHECK(ignoring["tokens"].get<std::vector<uint32_t>>() == full);
  const std::string text = ignoring["text"].get<std::string>();
  CHECK(text.size() > plain["text"].get<std::string>().size());

  json body{{"prompt", prompt}, {"max_tokens", kMax}, {"ignore_eos", true}};
  const auto [s3, raw] = cluster.post_raw("/v1/completions", body.dump());
  REQUIRE(s3 == 200);
  const json completion = json::parse(raw);
  CHECK(completion["usage"]["completion_tokens"] == kMax);
  CHECK(completion["choices"][0]["finish_reason"] == "length");
  CHECK(completion["choices"][0]["text"] == text);
  const Streamed streamed = stream_completion(cluster, body);
  CHECK(streamed.status == 200);
  CHECK(streamed.done);
  CHECK(streamed.finish_reason == "length");
  CHECK(streamed.text == text);
  body["ignore_eos"] = false;
  const json stopped = json::parse(cluster.post_raw("/v1/completions", body.dump()).second);
  CHECK(stopped["choices"][0]["finish_reason"] == "stop");
  CHECK(stopped["usage"]["completion_tokens"] == ended.size());
  // A stop string still ends it: the answer's text up to its last 3 characters' start.
  body["ignore_eos"] = true;
  body["stop"] = text.substr(text.size() - 3);
  const json cut = json::parse(cluster.post_raw("/v1/completions", body.dump()).second);
  CHECK(cut["choices"][0]["finish_reason"] == "stop");
  CHECK(text.rfind(cut["choices"][0]["text"].get<std::string>(), 0) == 0);
  CHECK(cut["choices"][0]["text"].get<std::string>().size() < text.size());
  body.erase("stop");
  body["ignore_eos"] = "yes";
  const auto [s4, refused] = cluster.post_raw("/v1/completions", body.dump());
  CHECK(s4 == 400);
  CHECK_THAT(refused, Catch::Contains("ignore_eos"));
  stop_cleanly(cluster);
}
