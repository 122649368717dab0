// The embedding cache end to end: real role processes, requests through the router, half of them with an
// image sent before. With the caches on every answer equals the colocated oracle and the cache-off run, the
// repeated images are neither encoded nor transferred again (counters of the encoder and prefill), and the
// embedding transfers the encoder delivered are exactly the first-seen images.
#include <catch2/catch.hpp>

#include "cluster.hpp"
#include "epd/http/base64.hpp"
#include "workload.hpp"

using namespace epd;
using namespace epd::testing;
using nlohmann::json;

namespace {

// 12 requests, one at a time: 6 distinct images, then each of them again (other prompts).
std::vector<Case> repeated_images() {
  std::vector<Case> out;
  for (int i = 0; i < 12; ++i) {
    Case c;
    c.prompt = "picture " + std::to_string(i) + ": what is in it?";
    c.image = model::make_test_image(16 + 8 * (i % 3), 16, uint64_t(i % 6));
    c.max_tokens = 5;
    out.push_back(std::move(c));
  }
  return out;
}

struct Run {
  std::vector<std::vector<uint32_t>> tokens;
  std::string encoder, prefill;  // scrapes after the run
};

Run run(const std::string& cache_bytes) {
  ClusterSpec spec;
  spec.metrics = true;
  spec.defaults["encoder"] = "embedding_cache_bytes = " + cache_bytes + "\n";
  spec.defaults["prefill"] = "embedding_cache_bytes = " + cache_bytes + "\n";
  Cluster cluster(spec);
  cluster.start();
  Run r;
  for (const auto& c : repeated_images()) {
    auto [status, body] = cluster.generate(request_of(c));
    INFO(body.dump().substr(0, 400));
    REQUIRE(status == 200);
    CHECK(body["attempts"] == 1);
    r.tokens.push_back(body["tokens"].get<std::vector<uint32_t>>());
  }
  const json inst = cluster.wait_all_free();
  for (const auto& i : inst) {
    CHECK(i["free_slots"] == i["total_slots"]);
    CHECK(i["active_rooms"] == 0);
  }
  r.encoder = cluster.scrape("encoder-0");
  r.prefill = cluster.scrape("prefill-0");
  cluster.stop();
  return r;
}

}  // namespace

TEST_CASE("embedding cache: repeated images skip encoding and transfer and the tokens are unchanged",
          "[e2e][multiproc]") {
  const auto cases = repeated_images();
  const Run off = run("0");
  const Run on = run("1048576");
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO("case " << i);
    CHECK(off.tokens[i] == oracle(cases[i]));
    CHECK(on.tokens[i] == off.tokens[i]);
  }
  // Off: nothing looked up, every image encoded and transferred.
  CHECK(metric_sum(off.encoder, "epd_embedding_cache_hits_total") == 0);
  CHECK(metric_sum(off.prefill, "epd_embedding_cache_hits_total") == 0);
  CHECK(metric_sum(off.encoder, "epd_transfer_size_bytes_count") == 12);
  // On: the 6 first-seen images missed and were encoded and transferred; the 6 repeats hit in the encoder
  // (not encoded) and in prefill (not transferred: the encoder skipped each write).
  CHECK(metric_sum(on.encoder, "epd_embedding_cache_misses_total") == 6);
  CHECK(metric_sum(on.encoder, "epd_embedding_cache_hits_total") == 6);
  CHECK(metric_sum(on.prefill, "epd_embedding_cache_misses_total") == 6);
  CHECK(metric_sum(on.prefill, "epd_embedding_cache_hits_total") == 6);
  CHECK(metric_sum(on.encoder, "epd_embedding_transfers_skipped_total") == 6);
  CHECK(metric_sum(on.prefill, "epd_embedding_transfers_skipped_total") == 6);
  CHECK(metric_sum(on.encoder, "epd_transfer_size_bytes_count") == 6);
  CHECK(metric_sum(on.prefill, "epd_embedding_cache_entries") == 6);
  CHECK(metric_sum(on.prefill, "epd_embedding_cache_bytes_saved_total") ==
        metric_sum(on.encoder, "epd_transfer_size_bytes_sum"));  // the repeats: the first-seen bytes again
  CHECK(metric_sum(on.encoder, "epd_embedding_cache_bytes_saved_total") ==
        metric_sum(on.prefill, "epd_embedding_cache_bytes_saved_total"));
}
