#include <catch2/catch.hpp>
#include <cstring>
#include <numeric>
#include <random>

#include "roles/kv_write_plan.hpp"

using namespace epd::actors;
using epd::protocol::KvLayout;

namespace {
KvLayout layout(uint32_t pages) {
  KvLayout l;
  l.layers = 3;
  l.kv_heads = 2;
  l.head_dim = 4;
  l.page_size = 4;
  l.num_pages = pages;
  return l;
}

// Applies the plan with memcpy and checks every logical page of [first, end) arrived intact.
void check_copy(const std::vector<uint32_t>& src_pages, const std::vector<uint32_t>& dst_pages,
                uint32_t first, uint32_t end, size_t expect_ops) {
  const KvLayout sl = layout(16), dl = layout(24);
  std::vector<uint8_t> src(sl.total_bytes()), dst(dl.total_bytes(), 0);
  std::mt19937 rng(7);
  for (auto& b : src) b = uint8_t(rng());
  KvSide s{sl, reinterpret_cast<uint64_t>(src.data()), src_pages};
  KvSide d{dl, reinterpret_cast<uint64_t>(dst.data()), dst_pages};
  auto ops = plan_kv_writes(s, d, first, end);
  CHECK(ops.size() == expect_ops);
  for (const auto& op : ops) {
    REQUIRE(op.remote_addr >= d.base);
    REQUIRE(op.remote_addr + op.len <= d.base + dst.size());
    std::memcpy(reinterpret_cast<void*>(op.remote_addr), reinterpret_cast<const void*>(op.local_addr),
                op.len);
  }
  for (uint32_t layer = 0; layer < sl.layers; ++layer)
    for (uint32_t kind = 0; kind < 2; ++kind)
      for (uint32_t p = 0; p < src_pages.size(); ++p) {
        const bool in = p >= first && p < end;
        const uint8_t* a = src.data() + sl.page_offset(layer, kind, src_pages[p]);
        const uint8_t* b = dst.data() + dl.page_offset(layer, kind, dst_pages[p]);
        std::vector<uint8_t> zero(sl.page_bytes(), 0);
        INFO("layer " << layer << " kind " << kind << " page " << p);
        CHECK(std::memcmp(b, in ? a : zero.data(), sl.page_bytes()) == 0);
      }
}
}  // namespace

TEST_CASE("contiguous runs on both sides merge into one write per layer and K/V", "[actors][plan]") {
  check_copy({0, 1, 2, 3}, {10, 11, 12, 13}, 0, 4, 3 * 2 * 1);
}

TEST_CASE("a break on either side splits the run", "[actors][plan]") {
  check_copy({0, 1, 5, 6}, {10, 11, 12, 13}, 0, 4, 3 * 2 * 2);  // source break
  check_copy({0, 1, 2, 3}, {10, 11, 3, 4}, 0, 4, 3 * 2 * 2);    // destination break
  check_copy({3, 2, 1, 0}, {0, 1, 2, 3}, 0, 4, 3 * 2 * 4);      // reversed: nothing merges
}

TEST_CASE("only the requested logical pages are written", "[actors][plan]") {
  check_copy({0, 1, 2, 3, 4, 5}, {20, 21, 22, 23, 7, 8}, 2, 5, 3 * 2 * 2);
  check_copy({0, 1}, {0, 1}, 1, 1, 0);  // empty range, no writes
}

TEST_CASE("a prompt's partial last page is written only as far as its tokens, token-major only",
          "[actors][plan]") {
  KvLayout l = layout(8);  // 4 tokens a page, 2 heads x 4 dims of f32: 32 bytes a token
  std::vector<uint32_t> src{0, 1, 2}, dst{4, 5, 6};
  KvSide s{l, 0, src}, d{l, 1 << 20, dst};
  auto ops = plan_kv_writes(s, d, 0, 3, 1);  // the third page holds 1 token
  REQUIRE(ops.size() == 3 * 2);
  for (const auto& op : ops) CHECK(op.len == 2 * l.page_bytes() + 32);
  CHECK(plan_kv_writes(s, d, 0, 3, 0)[0].len == 3 * l.page_bytes());  // 0: whole pages
  l.order = epd::protocol::KvDimOrder::head_token_dim;  // a token's bytes are spread over the page
  KvSide hs{l, 0, src}, hd{l, 1 << 20, dst};
  CHECK(plan_kv_writes(hs, hd, 0, 3, 1)[0].len == 3 * l.page_bytes());
}

TEST_CASE("tokens decode holds at the start of the first page are not written, token-major only",
          "[actors][plan]") {
  KvLayout l = layout(8);  // 4 tokens a page, 32 bytes a token
  std::vector<uint32_t> src{0, 1, 2}, dst{4, 5, 6};
  KvSide s{l, 0, src}, d{l, 1 << 20, dst};
  auto ops = plan_kv_writes(s, d, 1, 3, 0, 3);  // pages 1..2, decode holds page 1's first 3 tokens
  REQUIRE(ops.size() == 3 * 2);
  for (const auto& op : ops) {
    CHECK(op.len == 2 * l.page_bytes() - 3 * 32);
    CHECK((op.local_addr - l.page_offset(0, 0, 1)) % l.page_bytes() == 3 * 32);  // from the fourth token on
    CHECK(op.remote_addr - op.local_addr == (1u << 20) + (5 - 1) * l.page_bytes());
  }
  // One page, held at its start and short at its end: only the tokens between.
  ops = plan_kv_writes(s, d, 2, 3, 3, 1);
  for (const auto& op : ops) CHECK(op.len == 2 * 32);
  l.order = epd::protocol::KvDimOrder::head_token_dim;
  KvSide hs{l, 0, src}, hd{l, 1 << 20, dst};
  CHECK(plan_kv_writes(hs, hd, 1, 3, 0, 3)[0].len == 2 * l.page_bytes());
}
