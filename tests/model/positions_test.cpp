// PromptPositions: where an M-RoPE model's rows rotate, by llama.cpp's rule (mtmd's image chunks: an image
// at n_past has t = n_past, y = n_past + row, x = n_past + column, and moves n_past on by max(cols, rows)).
#include <catch2/catch.hpp>

#include "epd/model/positions.hpp"

using namespace epd::model;

namespace positions_test {

constexpr TokenId I = 999;  // the image placeholder

std::vector<TokenId> prompt_of(std::initializer_list<std::pair<TokenId, uint32_t>> runs) {
  std::vector<TokenId> out;
  for (auto [id, n] : runs) out.insert(out.end(), n, id);
  return out;
}

}  // namespace positions_test

using positions_test::I;

TEST_CASE("M-RoPE positions: text is its slot, an image its grid, text after it resumes max(cols, rows) on",
          "[model][positions]") {
  SECTION("no images: every position is the slot") {
    auto p = PromptPositions::make(std::vector<TokenId>{1, 2, 3}, I, {});
    REQUIRE(p.ok());
    CHECK(p->empty());
    CHECK(p->lag() == 0);
    CHECK(p->at(2) == RopePosition{2, 2, 2, 2});
    CHECK(p->at(500) == RopePosition{500, 500, 500, 500});
  }
  // a b [3 x 2 image] c [2 x 2 image] d, as llama.cpp places it: a 0, b 1, the first image at n_past 2 (its
  // rows (y, x) from (2, 2) to (3, 4)), c at 2 + max(3, 2) = 5, the second image at 6, d at 6 + 2 = 8.
  const auto prompt = positions_test::prompt_of({{1, 2}, {I, 6}, {3, 1}, {I, 4}, {4, 1}});
  const ImageGrid grids[] = {{3, 2}, {2, 2}};
  auto p = PromptPositions::make(prompt, I, grids);
  REQUIRE(p.ok());
  CHECK(p->at(0) == RopePosition{0, 0, 0, 0});
  CHECK(p->at(1) == RopePosition{1, 1, 1, 1});
  CHECK(p->at(2) == RopePosition{2, 2, 2, 0});  // row 0, column 0
  CHECK(p->at(4) == RopePosition{2, 2, 4, 0});  // row 0, column 2
  CHECK(p->at(5) == RopePosition{2, 3, 2, 0});  // row 1, column 0
  CHECK(p->at(7) == RopePosition{2, 3, 4, 0});
  CHECK(p->at(8) == RopePosition{5, 5, 5, 5});  // c
  CHECK(p->at(9) == RopePosition{6, 6, 6, 0});
  CHECK(p->at(12) == RopePosition{6, 7, 7, 0});
  CHECK(p->at(13) == RopePosition{8, 8, 8, 8});      // d
  CHECK(p->lag() == 5);                              // (6 - 3) + (4 - 2)
  CHECK(p->at(20) == RopePosition{15, 15, 15, 15});  // an answer's token
  for (uint32_t s = 0; s < prompt.size(); ++s) CHECK(p->is_image(s) == (prompt[s] == I));

  SECTION("two images in one run of rows, the second a column") {
    const auto run = positions_test::prompt_of({{1, 1}, {I, 4}, {2, 1}});
    const ImageGrid two[] = {{2, 1}, {1, 2}};
    auto q = PromptPositions::make(run, I, two);
    REQUIRE(q.ok());
    CHECK(q->at(2) == RopePosition{1, 1, 2, 0});
    CHECK(q->at(3) == RopePosition{3, 3, 3, 0});  // the second starts at 1 + max(2, 1)
    CHECK(q->at(4) == RopePosition{3, 4, 3, 0});
    CHECK(q->at(5) == RopePosition{5, 5, 5, 5});
  }
  SECTION("grids that do not tile the image rows are refused, naming what is wrong") {
    const ImageGrid too_big[] = {{3, 3}, {2, 2}};
    auto a = PromptPositions::make(prompt, I, too_big);
    REQUIRE_FALSE(a.ok());
    CHECK_THAT(a.error().detail, Catch::Contains("meets text at slot 8"));
    const ImageGrid one[] = {{3, 2}};
    auto b = PromptPositions::make(prompt, I, one);
    REQUIRE_FALSE(b.ok());
    CHECK_THAT(b.error().detail, Catch::Contains("beyond its 1 grids"));
    const ImageGrid three[] = {{3, 2}, {2, 2}, {1, 1}};
    auto c = PromptPositions::make(prompt, I, three);
    REQUIRE_FALSE(c.ok());
    CHECK_THAT(c.error().detail, Catch::Contains("3 grids for 2 images"));
    const ImageGrid empty[] = {{0, 2}, {2, 2}};
    CHECK_FALSE(PromptPositions::make(prompt, I, empty).ok());
    const ImageGrid huge[] = {{UINT32_MAX, UINT32_MAX}, {2, 2}};
    CHECK_FALSE(PromptPositions::make(prompt, I, huge).ok());
  }
}
