// llama.cpp's multimodal library as the oracle of epd's vision path, on random LLaVA-1.5 and -1.6 ("mlp",
// without and with pinpoints), SmolVLM
// ("idefics3"), Pixtral and Mistral-Small-3.1 ("pixtral", without and with the patch merger), InternVL
// ("internvl"), Gemma 3 and Qwen2-VL / Qwen2.5-VL ("qwen2vl", "qwen2.5vl": M-RoPE) pairs: the
// prompt epd lays out for text + images is token for token the one mtmd_tokenize lays out (BOS, template,
// markers, each image's rows), the encoder's rows are libmtmd's, and the greedy answer is llama.cpp's
// (libllama + libmtmd, epd-mtmd-reference), colocated and with decode in another KV layout. Files epd does
// not serve are refused at start, naming what is missing.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <set>

#include "epd/model/chat_template.hpp"
#include "epd/model/generate.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/mmproj.hpp"
#include "epd/model/prompt_codec.hpp"
#include "epd/model/vision.hpp"
#include "vision_fixture.hpp"
#include "vision_oracle.hpp"
#include "vision_pair.hpp"

namespace {

namespace fs = std::filesystem;
using namespace epd::model;
using namespace epd::model::testing;

// One conversation: its images (sizes; the pixels follow from the seed) and a user text with markers.
struct Case {
  std::vector<MediaDims> sizes;
  std::string user;
};

const std::vector<Case> kCases = {
    {{{48, 48}}, "<__media__>What is in the picture?"},
    {{{96, 40}}, "Describe <__media__> briefly."},                   // landscape: idefics3 tiles 2 x 1
    {{{30, 90}}, "<__media__>\nAnd this one?"},                      // portrait: 1 x 2
    {{{64, 64}, {90, 45}}, "Compare <__media__> and <__media__>."},  // two images in one message
    // Larger than LLaVA-1.6's 112-pixel tile: its pinpoints' tiles, then the overview.
    {{{200, 100}, {130, 250}}, "<__media__> then <__media__>: which is taller?"},
};

// LLaVA-1.6's pinpoints at the fixture's 112-pixel tile (the real files' 336 grid, scaled).
VisionSpec anyres() {
  VisionSpec s;
  s.pinpoints = {224, 112, 112, 224, 224, 224, 336, 112, 112, 336};
  return s;
}

struct Prepared {
  std::vector<Media> images;
  std::vector<fs::path> files;
  std::vector<ChatTurn> turns;
};

Prepared prepare(const Pair& pair, const Case& c, uint64_t seed) {
  Prepared p;
  for (size_t i = 0; i < c.sizes.size(); ++i) {
    const Image image = make_test_image(c.sizes[i].width, c.sizes[i].height, seed + i);
    p.files.push_back(pair.dir / ("image-" + std::to_string(seed) + "-" + std::to_string(i) + ".png"));
    write_png_file(p.files.back(), image);
    p.images.push_back(image);
  }
  p.turns = {{"system", "You see pictures.", false}, {"user", c.user, true}};
  return p;
}

// "<__media__>" per picture then "x", as llama.cpp's libmtmd lays it out (epd-mtmd-reference --layout-only):
// pictures of these sizes, flat (only the size matters to a layout, and flat files stay small).
OracleRun laid_out_by_llama(const Pair& pair, std::span<const MediaDims> sizes) {
  std::vector<fs::path> files;
  std::string prompt;
  for (const MediaDims& dims : sizes) {
    files.push_back(pair.dir / ("flat-" + std::to_string(files.size()) + ".png"));
    write_png_file(files.back(), Image{dims.width, dims.height,
                                       std::vector<uint8_t>(size_t(dims.width) * dims.height * 3, 90)});
    prompt += "<__media__>";
  }
  return run_mtmd_reference(EPD_MTMD_REFERENCE, pair.paths.lm, pair.paths.mmproj, files, prompt + "x", 0,
                            *image_token(pair.cfg), false, 2, false, /*layout_only=*/true);
}

// The conversation as llama-server hands it to mtmd: the template's text with the markers in it (mtmd adds
// BOS itself).
std::string templated(const std::vector<ChatTurn>& turns) {
  auto text = render_chat_text("", turns, "", "");  // llama.cpp's ChatML default
  REQUIRE(text.ok());
  return *text;
}

}  // namespace

TEST_CASE("vision: epd lays out text and images as libmtmd does, and answers as llama.cpp does",
          "[vision][oracle]") {
  VisionSpec merged;
  merged.spatial_merge = 2;
  VisionSpec resampler;  // its heads are 128 wide (clip.cpp): a projector of whole heads
  resampler.lm_width = 128;
  const std::pair<const char*, VisionSpec> pairs[] = {
      {"mlp", {}},      {"mlp", anyres()}, {"idefics3", {}}, {"pixtral", {}},   {"pixtral", merged},
      {"internvl", {}}, {"gemma3", {}},    {"qwen2vl", {}},  {"qwen2.5vl", {}}, {"minicpmv", resampler}};
  for (const auto& [projector, spec] : pairs) {
    INFO("spatial merge " << spec.spatial_merge << ", pinpoints " << spec.pinpoints.size() / 2);
    Pair pair(projector, spec);
    auto codec = pair.codec();
    REQUIRE(codec->mmproj());
    const TokenId slot = *image_token(pair.cfg);
    auto runner = make_vision_runner(pair.cfg);
    REQUIRE(runner.ok());
    for (size_t i = 0; i < kCases.size(); ++i) {
      INFO(projector << " case " << i << ": " << kCases[i].user);
      const Prepared p = prepare(pair, kCases[i], 100 + i);
      auto ids = codec->chat(p.turns, kCases[i].sizes);
      REQUIRE(ids.ok());
      const OracleRun theirs =
          run_mtmd_reference(EPD_MTMD_REFERENCE, pair.paths.lm, pair.paths.mmproj, p.files,
                             templated(p.turns), 12, slot, /*embeddings=*/true, 2,
                             /*f32_kv=*/true);
      // The whole prompt, token for token: a wrong row count, a missing marker or a row in the wrong place
      // differs here.
      CHECK(*ids == theirs.prompt);

      // The encoder's rows are libmtmd's, image after image.
      auto encoder = make_vision_encoder(pair.cfg);
      REQUIRE(encoder.ok());
      std::vector<float> rows;
      for (const Media& item : p.images) {
        auto e = encode_media(**encoder, item);
        REQUIRE(e.ok());
        CHECK(e->dim == pair.cfg.d_model);
        rows.insert(rows.end(), e->data.begin(), e->data.end());
      }
      CHECK(theirs.embedding_width == pair.cfg.d_model);
      CHECK(rows == theirs.embeddings);

      // The greedy answer, colocated and with decode's KV in another layout (the staged path). Gemma 3's
      // staged run prefills in chunks of 8 tokens, whose grid lines fall inside its 16-row images: a
      // chunk runs to the image's end (chunk_grid.hpp), or its first rows would not see its last.
      GenerateOptions opts;
      opts.max_tokens = 12;
      opts.dtype = DType::f32;  // as the oracle's KV cache
      opts.stop_tokens.assign(codec->stop_tokens().begin(), codec->stop_tokens().end());
      auto grids = codec->image_grids(kCases[i].sizes);  // Qwen2-VL's: where its image rows rotate
      REQUIRE(grids.ok());
      opts.image_grids = *grids;
      for (bool staged : {false, true}) {
        if (staged) opts.decode_kv = KvLayoutChoice{4, DType::f32, KvDimOrder::head_token_dim};
        if (staged && (pair.cfg.bidirectional_images || pair.cfg.mrope)) opts.chunk = 8;
        auto ours = generate_tokens(**runner, *ids, opts, p.images);
        REQUIRE(ours.ok());
        std::vector<TokenId> answer = ours->tokens;
        if (ours->stopped_at_eos) answer.pop_back();  // llama.cpp's run ends before the end token
        INFO("staged " << staged);
        CHECK(answer == theirs.generated);
        // M-RoPE: an answer resumed after its first 3 tokens (which end the prompt, replayed as decode steps
        // as a hand-over replays them) goes on as the whole run did: they rotate behind their slots by the
        // images' lag, as the tokens decode draws after them do.
        if (pair.cfg.mrope && ours->tokens.size() > 3) {
          GenerateOptions rest = opts;
          rest.first_index = 3;
          rest.max_tokens = opts.max_tokens - 3;
          std::vector<TokenId> resumed_prompt = *ids;
          resumed_prompt.insert(resumed_prompt.end(), ours->tokens.begin(), ours->tokens.begin() + 3);
          auto resumed = generate_tokens(**runner, resumed_prompt, rest, p.images);
          REQUIRE(resumed.ok());
          CHECK(resumed->tokens == std::vector<TokenId>(ours->tokens.begin() + 3, ours->tokens.end()));
        }
      }
    }
  }
}

TEST_CASE("vision: Pixtral's resize to 8..1024 cells rounds every size as libmtmd rounds it", "[vision]") {
  // Sizes on each path of the resize: kept (rounded to whole cells), scaled up to 8 cells, scaled down to
  // 1024 cells, and half-way cases of the rounding. The encoder compares its layout with mtmd_tokenize's
  // for every image and fails naming both; the rows it returns are the layout's.
  // 9x8, 32x36, 86x43 and 72x1 scale up to a product that lands on a whole cell in float and not in
  // double (with 28-pixel cells).
  const MediaDims sizes[] = {{1, 1},     {15, 15},     {17, 9},     {24, 40},   {100, 3}, {3, 100},
                             {640, 480}, {1000, 1000}, {2000, 300}, {513, 257}, {56, 56}, {8, 2000},
                             {9, 8},     {32, 36},     {86, 43},    {72, 1}};
  VisionSpec merged;
  merged.spatial_merge = 2;
  for (const VisionSpec& spec : {VisionSpec{}, merged}) {
    Pair pair("pixtral", spec);
    auto codec = pair.codec();
    auto encoder = make_vision_encoder(pair.cfg);
    REQUIRE(encoder.ok());
    for (const MediaDims& dims : sizes) {
      INFO("merge " << spec.spatial_merge << ", " << dims.width << "x" << dims.height);
      auto layout = media_layout(*codec->mmproj(), dims);
      REQUIRE(layout.ok());
      const uint32_t rows = layout_rows(*layout);
      CHECK(rows >= 8);  // at least 8 cells, and [IMG_BREAK] rows between their rows
      auto e = (*encoder)->encode(make_test_image(dims.width, dims.height, dims.width * 7 + dims.height));
      REQUIRE(e.ok());
      CHECK(e->tokens == rows);
    }
  }
}

TEST_CASE(
    "vision: Qwen2-VL's smart resize to 8..4096 cells lays out every size as libmtmd does, grid and all",
    "[vision]") {
  // Every path of the resize (kept and rounded to whole 28-pixel cells, scaled up to 8 cells, scaled down
  // to 4096), extreme aspect ratios, and sizes whose cell counts round differently in double than in
  // libmtmd's float: 9x8 (float 4 x 3 cells, double 3 x 3), 8x144 (1 x 13 / 1 x 12), 1812x1812 (64 x 64 /
  // 63 x 63), 908x3632 (31 x 127 / 32 x 128). The small ones are encoded (the encoder compares the layout
  // and the grid of positions with mtmd_tokenize's and fails naming both); all are laid out by llama.cpp
  // itself (epd-mtmd-reference --layout-only), whose rows and nx x ny grid must be epd's.
  const MediaDims encoded[] = {{1, 1},   {15, 15}, {48, 48},   {9, 8},     {2, 9},    {8, 144},
                               {100, 3}, {3, 100}, {200, 100}, {640, 480}, {1, 16384}};
  const MediaDims laid_out[] = {{1812, 1812}, {908, 3632}, {3000, 2000}, {16384, 210}, {16384, 1}};
  Pair pair("qwen2vl");
  auto codec = pair.codec();
  auto encoder = make_vision_encoder(pair.cfg);
  REQUIRE(encoder.ok());
  std::vector<MediaDims> all(std::begin(encoded), std::end(encoded));
  all.insert(all.end(), std::begin(laid_out), std::end(laid_out));
  std::vector<std::string> grids;  // epd's nx x ny
  std::vector<uint32_t> rows;
  for (const MediaDims& dims : all) {
    INFO(dims.width << "x" << dims.height);
    auto layout = media_layout(*codec->mmproj(), dims);
    REQUIRE(layout.ok());
    REQUIRE(layout->size() == 3);
    CHECK((*layout)[0].piece == "<|vision_start|>");
    CHECK((*layout)[2].piece == "<|vision_end|>");
    const LayoutItem& run = (*layout)[1];
    REQUIRE(run.cols != 0);
    CHECK(run.rows % run.cols == 0);
    CHECK(run.rows >= 8);
    CHECK(run.rows <= 4096);
    grids.push_back(std::to_string(run.cols) + " x " + std::to_string(run.rows / run.cols));
    rows.push_back(run.rows);
  }
  const OracleRun theirs = laid_out_by_llama(pair, all);
  CHECK(theirs.image_chunks == rows);
  std::vector<std::string> their_grids;
  for (const auto& [nx, ny] : theirs.image_grids)
    their_grids.push_back(std::to_string(nx) + " x " + std::to_string(ny));
  CHECK(their_grids == grids);
  for (const MediaDims& dims : encoded) {
    INFO(dims.width << "x" << dims.height);
    auto e = (*encoder)->encode(make_test_image(dims.width, dims.height, dims.width * 7 + dims.height));
    if (!e) FAIL(e.error().detail);
    CHECK(e->tokens == layout_rows(*media_layout(*codec->mmproj(), dims)));
  }
  // Past the limits: a side longer than any decoder takes, and more rows than an image may take here
  // (min(max_seq, 4096) = 1024), refused at the router naming the limit.
  auto wide = media_layout(*codec->mmproj(), {16385, 1});
  REQUIRE_FALSE(wide.ok());
  CHECK(wide.error().code == epd::protocol::ErrorCode::invalid_request);
  CHECK_THAT(wide.error().detail, Catch::Contains("16385x1") && Catch::Contains("16384"));
  const MediaDims big[] = {{3000, 2000}};
  auto over = codec->prompt("x", big);
  REQUIRE_FALSE(over.ok());
  CHECK(over.error().code == epd::protocol::ErrorCode::invalid_request);
  CHECK_THAT(over.error().detail, Catch::Contains("3000x2000") && Catch::Contains("more than the 1024"));
}

TEST_CASE("vision: MiniCPM-V's slice grids are libmtmd's for every shape, markers and all", "[vision]") {
  // 112-pixel slices: within one (overview only), just past one side, and images whose area in slices
  // and aspect pick each grid of 2 to 9 slices (1 x 2 ... 3 x 3, 9 x 1), near ties of aspect, and extreme
  // shapes. The whole prompt is llama.cpp's token for token (epd-mtmd-reference --layout-only); a few are
  // encoded, and the encoder checks its layout against mtmd_tokenize's.
  const MediaDims laid_out[] = {{112, 112}, {113, 20},  {20, 113},  {200, 100}, {100, 200},  {300, 100},
                                {100, 300}, {224, 224}, {400, 120}, {120, 400}, {300, 300},  {1000, 10},
                                {10, 1000}, {500, 499}, {336, 224}, {224, 336}, {1000, 112}, {3000, 2000},
                                {16384, 1}, {1, 16384}, {641, 639}, {600, 112}, {800, 112}};
  const MediaDims encoded[] = {{48, 48}, {113, 20}, {300, 300}, {1000, 10}};
  VisionSpec spec;
  spec.lm_width = 128;     // the resampler's heads are 128 wide
  spec.lm_context = 4096;  // every picture in one prompt: up to 10 chunks each
  spec.query_num = 16;     // of 16 rows (the real files' 64 would overflow the request's 4096)
  Pair pair("minicpmv", spec);
  auto codec = pair.codec();
  auto ids = codec->prompt("x", laid_out);
  if (!ids) FAIL(ids.error().detail);
  CHECK(*ids == laid_out_by_llama(pair, laid_out).prompt);
  std::set<size_t> grids;  // chunks of each picture: the overview alone, and every grid of 2 to 9 slices
  for (const MediaDims& dims : laid_out) {
    auto layout = media_layout(*codec->mmproj(), dims);
    REQUIRE(layout.ok());
    grids.insert(
        std::count_if(layout->begin(), layout->end(), [](const LayoutItem& i) { return i.rows != 0; }));
  }
  CHECK(grids == std::set<size_t>{1, 3, 4, 5, 6, 7, 8, 9, 10});
  auto encoder = make_vision_encoder(pair.cfg);
  REQUIRE(encoder.ok());
  for (const MediaDims& dims : encoded) {
    INFO(dims.width << "x" << dims.height);
    auto e = (*encoder)->encode(make_test_image(dims.width, dims.height, dims.width + 5 * dims.height));
    if (!e) FAIL(e.error().detail);
    CHECK(e->tokens == layout_rows(*media_layout(*codec->mmproj(), dims)));
  }
}

TEST_CASE("vision: LLaVA-1.6 picks the pinpoint libmtmd picks for every shape", "[vision]") {
  // Within one tile (overview only), each pinpoint winning, ties of kept pixels broken by waste, and a
  // picture too thin for any pinpoint (refused before libmtmd, which would tile from an unset size).
  const MediaDims sizes[] = {{112, 112}, {113, 20},  {200, 100}, {100, 200}, {300, 300}, {400, 90},
                             {90, 400},  {224, 224}, {1000, 10}, {500, 499}, {225, 113}};
  Pair pair("mlp", anyres());
  auto codec = pair.codec();
  auto encoder = make_vision_encoder(pair.cfg);
  REQUIRE(encoder.ok());
  std::set<uint32_t> tiles_seen;
  for (const MediaDims& dims : sizes) {
    INFO(dims.width << "x" << dims.height);
    auto layout = media_layout(*codec->mmproj(), dims);
    REQUIRE(layout.ok());
    tiles_seen.insert(uint32_t(layout->size()) - 1);
    auto e = (*encoder)->encode(make_test_image(dims.width, dims.height, dims.width + 3 * dims.height));
    REQUIRE(e.ok());
    CHECK(e->tokens == layout_rows(*layout));
  }
  CHECK(tiles_seen == std::set<uint32_t>{0, 2, 3, 4});  // overview only, 2x1 / 1x2, 3x1 / 1x3, 2x2
  const MediaDims thin[] = {{16000, 1}};
  auto ids = codec->prompt("x", thin);
  REQUIRE_FALSE(ids.ok());
  CHECK_THAT(ids.error().detail, Catch::Contains("16000x1") && Catch::Contains("too long and thin"));
  // Images that each fit but together overflow the embedding slot (1,024 rows at this context) are refused
  // at the router, naming the limit, not by the encoder after the work.
  const std::vector<MediaDims> many(6, MediaDims{200, 100});  // 6 x (2 tiles + overview) x 64 = 1,152
  auto over = codec->prompt("x", many);
  REQUIRE_FALSE(over.ok());
  CHECK_THAT(over.error().detail, Catch::Contains("1152 rows together") && Catch::Contains("1024"));
  CHECK(codec->prompt("x", std::span(many).first(5)).ok());  // 960 rows
}

TEST_CASE("vision: an image the tiling cannot lay out is a clear error, not a crash", "[vision]") {
  Pair pair("idefics3");
  auto codec = pair.codec();
  const MediaDims thin[] = {{1000, 10}};
  auto ids = codec->prompt("x", thin);
  REQUIRE_FALSE(ids.ok());
  CHECK(ids.error().code == epd::protocol::ErrorCode::invalid_request);
  CHECK_THAT(ids.error().detail, Catch::Contains("1000x10") && Catch::Contains("too long and thin"));
  auto encoder = make_vision_encoder(pair.cfg);
  REQUIRE(encoder.ok());
  auto e = (*encoder)->encode(make_test_image(1000, 10, 1));
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().code == epd::protocol::ErrorCode::invalid_request);
  // A model without an mmproj takes no image at all.
  ModelConfig text_only = pair.cfg;
  text_only.mmproj.clear();
  auto plain = PromptCodec::for_model(text_only);
  REQUIRE(plain.ok());
  const MediaDims one[] = {{8, 8}};
  CHECK_THAT((*plain)->prompt("x", one).error().detail, Catch::Contains("takes no images"));
}

TEST_CASE("vision: mmproj files epd cannot serve are refused at start, naming what is missing", "[vision]") {
  auto refused = [](const ModelConfig& cfg) {
    auto codec = PromptCodec::for_model(cfg);
    auto encoder = make_vision_encoder(cfg);
    REQUIRE_FALSE(codec.ok());
    REQUIRE_FALSE(encoder.ok());
    CHECK(codec.error().code == epd::protocol::ErrorCode::config_error);
    CHECK(encoder.error().detail == codec.error().detail);  // the router and the encoder say the same
    return encoder.error().detail;
  };
  auto refusal = [&](const Pair& pair) { return refused(pair.cfg); };
  {
    VisionSpec wide;
    wide.projector_width = 96;  // the projector writes 96-wide rows, the LM embeds 64
    Pair pair("mlp", wide);
    CHECK_THAT(refusal(pair), Catch::Contains("rows of 96 values") && Catch::Contains("embeds 64"));
  }
  {
    Pair pair("qwen3vl_merger");
    CHECK_THAT(refusal(pair), Catch::Contains("qwen3vl_merger") && Catch::Contains("M-RoPE"));
  }
  {
    // A Qwen2-VL type name on another tower's tensors: libmtmd would crash encoding it.
    Pair pair("qwen2vl_merger");
    CHECK_THAT(refusal(pair), Catch::Contains("missing v.patch_embd.weight.1"));
  }
  {
    // Qwen2-VL's projector with a language model that does not rotate by M-RoPE, and an M-RoPE language
    // model with a projector whose rows are not a grid: mtmd would place the rows as neither meant.
    Pair qwen("qwen2vl"), llava("mlp");
    auto lm_of = [](const Pair& pair) {
      auto c = read_checkpoint_config(pair.paths.lm);
      REQUIRE(c.ok());
      return *c;
    };
    CHECK_THAT(refused(with_mmproj(lm_of(llava), qwen.paths.mmproj)),
               Catch::Contains("'qwen2vl_merger' places its rows by M-RoPE") &&
                   Catch::Contains("does not rotate by M-RoPE"));
    CHECK_THAT(refused(with_mmproj(lm_of(qwen), llava.paths.mmproj)),
               Catch::Contains("rotates by M-RoPE, projector 'mlp'"));
  }
  {
    Pair pair("gemma4v");
    CHECK_THAT(refusal(pair), Catch::Contains("gemma4v") && Catch::Contains("non-causal"));
  }
  {
    Pair pair("no_such_projector");
    CHECK_THAT(refusal(pair), Catch::Contains("'no_such_projector' is not one epd lays out"));
  }
  {
    Pair pair("mlp");
    const auto size = fs::file_size(pair.paths.mmproj);
    fs::resize_file(pair.paths.mmproj, size / 2);  // truncated: the header promises what is not there
    CHECK_THAT(refusal(pair), Catch::Contains(pair.paths.mmproj));
    fs::resize_file(pair.paths.mmproj, 100);
    CHECK_THAT(refusal(pair), Catch::Contains(pair.paths.mmproj));
  }
  {
    Pair pair("mlp");
    std::ofstream(pair.paths.mmproj, std::ios::trunc) << "not a gguf file at all";
    CHECK_THAT(refusal(pair), Catch::Contains("mmproj"));
  }
}
