// Staging for heterogeneous KV layouts, end to end (docs/staging.md): real role processes where decode
// holds its KV in another layout than prefill, so every chunk goes through decode's staging ring.
//
// Reference: the colocated run (the code epd-run uses) with the same layout split — prefill computes in its
// own layout (16-token pages, f32, token_head_dim), the prompt's KV is converted once into decode's layout,
// and decode reads that copy (model::GenerateOptions::decode_kv, `epd-run --decode-*`). Page size and dim
// order changes are lossless, so for them this reference equals the plain run (asserted below); an fp16
// decode pool rounds the KV once, so its reference is the converted copy — not an all-fp16 run, whose
// prefill would also attend over rounded KV and differ for a reason unrelated to transfer.
#include <catch2/catch.hpp>
#include <functional>
#include <thread>
#include <zmq.hpp>

#include "../launcher/test_util.hpp"
#include "cluster.hpp"
#include "epd/protocol/codec.hpp"
#include "workload.hpp"

using namespace epd;
using namespace epd::testing;
using nlohmann::json;

namespace {

// The `staging` figures of an instance's heartbeats, once `ready` holds for them (they lag by up to one
// heartbeat interval); the last seen if it never does within 5 s.
json staging_of(
    const Cluster& cluster, const std::string& id,
    const std::function<bool(const json&)>& ready = [](const json&) { return true; }) {
  const json inst =
      cluster.instance_when(id, [&](const json& i) { return i.contains("staging") && ready(i["staging"]); });
  INFO(inst.dump());
  REQUIRE(inst.contains("staging"));
  return inst["staging"];
}

// Prefill's and decode's figures once they agree: every chunk prefill wrote (at least `min_chunks`) was
// scattered and the ring is empty again.
std::pair<json, json> settled_staging(const Cluster& cluster, uint64_t min_chunks) {
  json prefill;
  const json decode = staging_of(cluster, "decode-0", [&](const json& d) {
    prefill = staging_of(cluster, "prefill-0");
    return prefill["chunks"] >= min_chunks && d["chunks"] == prefill["chunks"] && d["ring_used"] == 0;
  });
  return {prefill, decode};
}

// A cluster with these [defaults.prefill] and [defaults.decode] lines.
ClusterSpec staged_spec(const std::string& prefill, const std::string& decode) {
  ClusterSpec spec;
  spec.defaults["prefill"] = prefill;
  spec.defaults["decode"] = decode;
  return spec;
}

void stop_cleanly(Cluster& cluster) {
  const std::string reports = cluster.stop_and_collect_sanitizer_reports();
  INFO(reports);
  CHECK(reports.empty());
}

// Runs the workload on a cluster whose decode uses `decode_lines` and checks the staged path carried it.
void staged_run(const std::string& decode_lines, const model::KvLayoutChoice& kv, int n) {
  ClusterSpec spec;
  spec.defaults["decode"] = decode_lines;
  Cluster cluster(spec);
  cluster.start();
  run_and_compare(cluster, n, 4, kv);
  const auto [prefill, decode] = settled_staging(cluster, uint64_t(n));
  INFO("prefill " << prefill.dump() << " decode " << decode.dump());
  CHECK(prefill["chunks"].get<uint64_t>() >= uint64_t(n));  // every room was staged, none went direct
  CHECK(decode["chunks"] == prefill["chunks"]);
  CHECK(decode["rejected"] == 0);
  CHECK(prefill["rejected"] == 0);
  stop_cleanly(cluster);
}

}  // namespace

TEST_CASE("staging: decode with 64-token pages gets the reference tokens", "[e2e][multiproc][staging]") {
  const model::KvLayoutChoice kv{64, protocol::DType::f32, protocol::KvDimOrder::token_head_dim};
  for (const auto& c : workload(6)) CHECK(oracle(c, kv) == oracle(c));  // lossless
  staged_run("kv_page_size = 64\n", kv, 12);
}

TEST_CASE("staging: decode with the other dim order gets the reference tokens", "[e2e][multiproc][staging]") {
  const model::KvLayoutChoice kv{0, protocol::DType::f32, protocol::KvDimOrder::head_token_dim};
  for (const auto& c : workload(6)) CHECK(oracle(c, kv) == oracle(c));  // lossless
  staged_run("kv_order = \"head_token_dim\"\n", kv, 12);
}

TEST_CASE("staging: fp16 prefill to an fp32 decode with 64-token pages, converted in the scatter",
          "[e2e][multiproc][staging]") {
  const model::KvLayoutChoice kv{64, protocol::DType::f32, protocol::KvDimOrder::head_token_dim};
  staged_run("kv_page_size = 64\nkv_dtype = \"f32\"\nkv_order = \"head_token_dim\"\n", kv, 12);
}

TEST_CASE(
    "staging: a ring of two chunks serves 8 concurrent rooms, it wraps and nothing is overwritten early",
    "[e2e][multiproc][staging]") {
  // 16-token chunks of 512 B/token (tiny model, f32) = 8 KiB; the ring holds two of them.
  Cluster cluster(staged_spec("chunk_tokens = 16\n", "kv_page_size = 64\nstaging_ring_bytes = 16384\n"));
  cluster.start();
  const model::KvLayoutChoice kv{64, protocol::DType::f32, protocol::KvDimOrder::token_head_dim};
  // Tokens equal to the reference prove that no chunk was overwritten before it was scattered; decode also
  // checks every chunk's checksum in the ring before the scatter (a mismatch would fail the room).
  run_and_compare(cluster, 24, 8, kv);
  const auto [prefill, decode] = settled_staging(cluster, 24);
  INFO("prefill " << prefill.dump() << " decode " << decode.dump());
  CHECK(decode["ring_bytes"] == 16384);
  CHECK(decode["rounds"].get<uint64_t>() >= 4);  // the ring wrapped, many times
  CHECK(decode["ring_used"] == 0);               // everything consumed at the end
  CHECK(decode["watermarks"].get<uint64_t>() > 0);
  // Every WATERMARK prefill saw moved forward: one going backwards would have been rejected and counted.
  CHECK(prefill["watermarks"].get<uint64_t>() > 0);
  CHECK(prefill["rejected"] == 0);
  CHECK(decode["rejected"] == 0);
  CHECK(decode["chunks"] == prefill["chunks"]);
  stop_cleanly(cluster);
}

TEST_CASE("staging: a slow decode scatter makes prefill wait, not fail", "[e2e][multiproc][staging]") {
  Cluster cluster(
      staged_spec("chunk_tokens = 16\n",
                  "kv_page_size = 64\nstaging_ring_bytes = 16384\nstaging_scatter_delay_ms = 40\n"));
  cluster.start();
  run_and_compare(cluster, 12, 6, model::KvLayoutChoice{64});
  const auto [prefill, decode] = settled_staging(cluster, 12);
  INFO("prefill " << prefill.dump() << " decode " << decode.dump());
  CHECK(prefill["waits"].get<uint64_t>() > 0);  // chunks were held back by the watermark
  CHECK(cluster.stats()["failed"] == 0);
  CHECK(cluster.stats()["retries"] == 0);
  stop_cleanly(cluster);
}

TEST_CASE("staging: an oversized chunk fails only its own room, with the reason",
          "[e2e][multiproc][staging]") {
  // 32-token chunks of 256 B/token (f16) need up to 8 KiB; the ring has 4 KiB (one memory page: a ring is
  // allocated in whole ones): a prompt of more than 16 tokens has a chunk that can never fit, a shorter
  // one fits.
  Cluster cluster(staged_spec("chunk_tokens = 32\n", "kv_page_size = 64\nstaging_ring_bytes = 4096\n"));
  cluster.start();
  auto [big_status, big] = cluster.generate({{"prompt", std::string(60, 'x')}, {"max_tokens", 4}});
  INFO(big.dump());
  CHECK(big_status >= 400);
  CHECK(big.dump().find("oversized") != std::string::npos);
  CHECK(big.dump().find("can never fit") != std::string::npos);
  Case small{"short", std::nullopt, 5};
  auto [ok_status, ok] = cluster.generate(request_of(small));
  INFO(ok.dump());
  REQUIRE(ok_status == 200);
  CHECK(ok["tokens"].get<std::vector<uint32_t>>() == oracle(small, model::KvLayoutChoice{64}));
  // Both of its chunks (32 + 29 tokens) may have asked before the first refusal reached prefill.
  const json decode = staging_of(cluster, "decode-0", [](const json& s) { return s["oversized"] >= 1; });
  CHECK(decode["oversized"] >= 1);
  CHECK(decode["oversized"] <= 2);
  CHECK(cluster.stats()["retries"] == 0);  // oversized is not retryable: no other decode would help
  const json inst = cluster.wait_all_free();
  for (const auto& i : inst) CHECK(i["active_rooms"] == 0);
  stop_cleanly(cluster);
}

TEST_CASE("staging: garbage and out-of-place staging messages are rejected and logged, serving goes on",
          "[e2e][multiproc][staging]") {
  ClusterSpec spec;
  spec.defaults["decode"] = "kv_page_size = 64\n";
  Cluster cluster(spec);
  cluster.start();
  zmq::context_t ctx;
  protocol::StagingRsp rsp{12345, 0, protocol::StagingStatus::ok, uint64_t(1) << 40, 7, ""};  // past the ring
  protocol::ChunkReady ready{.room = 12345, .chunk = 0, .offset = 0, .bytes = 512, .tokens = 1};
  const std::map<std::string, std::vector<protocol::Body>> garbage{
      {"prefill-0", {rsp, protocol::Watermark{0, 0}, protocol::Watermark{~uint64_t{0}, 99}}},
      {"decode-0", {protocol::StagingReq{12345, 0, 1 << 20}, ready}}};
  for (const auto& [id, bodies] : garbage) {
    zmq::socket_t raw(ctx, zmq::socket_type::dealer);
    raw.set(zmq::sockopt::routing_id, "intruder");
    raw.set(zmq::sockopt::linger, 0);
    raw.set(zmq::sockopt::rcvtimeo, 3000);
    raw.connect(cluster.control_endpoint(id));
    for (const auto& body : bodies) {
      raw.send(zmq::buffer(protocol::encode({"intruder", 1, body})), zmq::send_flags::none);
      zmq::message_t reply;
      INFO(id << " " << protocol::type_name(protocol::type_of(body)));
      REQUIRE(raw.recv(reply));  // every one is answered with an ERROR
      auto err = protocol::decode({static_cast<const uint8_t*>(reply.data()), reply.size()});
      REQUIRE(err.ok());
      CHECK(std::holds_alternative<protocol::ErrorReply>(err->body));
    }
  }
  const model::KvLayoutChoice kv{64};
  run_and_compare(cluster, 6, 3, kv);
  CHECK(staging_of(cluster, "prefill-0", [](const json& s) { return s["rejected"] >= 3; })["rejected"] == 3);
  CHECK(staging_of(cluster, "decode-0", [](const json& s) { return s["rejected"] >= 2; })["rejected"] == 2);
  const std::string logs = cluster.logs();
  CHECK(logs.find("rejected STAGING_RSP from 'intruder'") != std::string::npos);
  CHECK(logs.find("rejected WATERMARK from 'intruder'") != std::string::npos);
  stop_cleanly(cluster);
}

TEST_CASE(
    "staging: a decode that never frees ring space fails the waiting rooms after the timeout, no deadlock",
    "[e2e][multiproc][staging]") {
  ClusterSpec spec;
  spec.max_attempts = 1;
  // Decode holds every chunk 3 s before its scatter; prefill gives a chunk 300 ms to get ring space.
  spec.defaults["prefill"] = "chunk_tokens = 16\nstaging_wait_timeout_ms = 300\n";
  spec.defaults["decode"] =
      "kv_page_size = 64\nstaging_ring_bytes = 16384\nstaging_scatter_delay_ms = 3000\n";
  Cluster cluster(spec);
  cluster.start();
  const pid_t prefill_pid = cluster.pid("prefill-0");
  const auto cases = workload(8);
  std::vector<std::pair<int, json>> answers(cases.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < cases.size(); ++i)
    threads.emplace_back([&, i] { answers[i] = cluster.generate(request_of(cases[i])); });
  for (auto& t : threads) t.join();  // every request is answered: nothing hangs
  size_t timed_out = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO("case " << i << ": " << answers[i].second.dump());
    if (answers[i].first == 200) {
      CHECK(answers[i].second["tokens"].get<std::vector<uint32_t>>() ==
            oracle(cases[i], model::KvLayoutChoice{64}));
      continue;
    }
    CHECK(answers[i].second["error"]["code"] == "waiting_timeout");
    CHECK(answers[i].second["error"]["message"].get<std::string>().find("waited 300 ms") !=
          std::string::npos);
    ++timed_out;
  }
  CHECK(timed_out > 0);  // two chunks fit the ring; the other rooms' chunks could never get space in time
  // The prefill keeps serving once the ring drains, and everything is released.
  Case small{"after", std::nullopt, 3};
  auto [status, body] = cluster.generate(request_of(small));
  INFO(body.dump());
  CHECK(status == 200);
  CHECK(cluster.pid("prefill-0") == prefill_pid);
  const json inst = cluster.wait_all_free(15000);
  for (const auto& i : inst) CHECK(i["active_rooms"] == 0);
  CHECK(staging_of(cluster, "decode-0", [](const json& s) { return s["ring_used"] == 0; })["ring_used"] == 0);
  stop_cleanly(cluster);
}

TEST_CASE(
    "staging: transfer workers crashing mid-staging fail their rooms, free their buffers and ring space",
    "[e2e][multiproc][staging]") {
  ClusterSpec spec;
  spec.max_attempts = 4;
  spec.defaults["prefill"] = "chunk_tokens = 16\n";
  spec.defaults["decode"] = "kv_page_size = 64\nstaging_ring_bytes = 16384\n";
  // prefill-0's workers throw after 25 ops per session, three times in all: several crashes while chunks
  // are being staged. A crash fails only the rooms it cuts short, so no request can lose all 4 attempts
  // (unbounded, a big room could lose 4 draws in a row: it failed a clean-clone run once).
  spec.instance_extra["prefill-0"] =
      "worker_max_restarts = 50\n[instance.transport]\nfault_throw_after_ops = 25\nfault_throw_max = 3\n";
  Cluster cluster(spec);
  cluster.start();
  run_and_compare(cluster, 24, 8, model::KvLayoutChoice{64}, /*retries_allowed=*/true);
  CHECK(cluster.stats()["retry_causes"].value("worker_crashed", 0) > 0);
  // Heartbeat figures lag by up to one interval.
  CHECK(cluster
            .instance_when("prefill-0",
                           [](const json& i) { return i["worker_restarts"] > 0; })["worker_restarts"]
            .get<uint64_t>() > 0);
  // Every source buffer of prefill and all of decode's ring are free again.
  const json prefill = staging_of(cluster, "prefill-0",
                                  [](const json& s) { return s["source_slots_free"] == s["source_slots"]; });
  CHECK(prefill["source_slots"].get<uint64_t>() > 0);
  CHECK(prefill["source_slots_free"] == prefill["source_slots"]);
  CHECK(staging_of(cluster, "decode-0", [](const json& s) { return s["ring_used"] == 0; })["ring_used"] == 0);
  stop_cleanly(cluster);
}

TEST_CASE("staging: bad KV layout and staging settings stop the role at start with a clear error",
          "[e2e][multiproc][staging]") {
  using namespace std::chrono_literals;
  const std::vector<std::pair<std::string, std::string>> bad{
      {"kv_dtype = \"f8\"\n", "kv_dtype"},
      {"kv_order = \"sideways\"\n", "kv_order"},
      {"kv_page_size = 0\n", "kv_page_size"},
      {"kv_page_size = 5000\n", "kv_page_size"},
      {"staging_ring_bytes = 1099511627776\n", "staging_ring_bytes"},  // 1 TiB
      {"staging_scatter_delay_ms = -5\n", "staging_scatter_delay_ms"}};
  for (const auto& [line, key] : bad) {
    Cluster cluster(staged_spec("", line));  // only writes the config; nothing is started
    launcher::test::Proc decode({std::string(EPD_BIN_DIR) + "/epd-decode", "--config",
                                 cluster.config_file().string(), "--id", "decode-0"});
    auto status = decode.wait(10s);
    REQUIRE(status);
    decode.read_all(1s);
    INFO(line << decode.output());
    CHECK(WIFEXITED(*status));
    CHECK(WEXITSTATUS(*status) == 2);
    CHECK(decode.output().find(key) != std::string::npos);
  }
}
