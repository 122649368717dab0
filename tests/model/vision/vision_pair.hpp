#pragma once
// A random pair written for one test (vision_fixture.hpp) and read back as a served config: the language
// model with its mmproj, 2 threads; removed with the object.
#include <unistd.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <memory>
#include <string>

#include "epd/model/llama.hpp"
#include "epd/model/mmproj.hpp"
#include "epd/model/prompt_codec.hpp"
#include "vision_fixture.hpp"

namespace epd::model::testing {

struct Pair {
  explicit Pair(const std::string& projector, VisionSpec spec = {}) {
    static int made = 0;  // several pairs of one projector in a process get their own folders
    dir = std::filesystem::temp_directory_path() /
          ("epd-vision-" + projector + "-" + std::to_string(::getpid()) + "-" + std::to_string(made++));
    std::filesystem::create_directories(dir);
    spec.projector = projector;
    auto p = write_vision_model(spec, dir);
    REQUIRE(p.ok());
    paths = *p;
    auto c = read_checkpoint_config(paths.lm);
    REQUIRE(c.ok());
    cfg = with_mmproj(*c, paths.mmproj);
    cfg.threads = 2;
  }
  ~Pair() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;
  std::shared_ptr<const PromptCodec> codec() const {
    auto c = PromptCodec::for_model(cfg);
    if (!c) FAIL(c.error().to_string());
    return *c;
  }
  std::filesystem::path dir;
  VisionModelPaths paths;
  ModelConfig cfg;
};

}  // namespace epd::model::testing
