#include "vqa.hpp"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "epd/model/chat.hpp"
#include "epd/model/generate.hpp"
#include "epd/model/image_codec.hpp"
#include "epd/model/mmproj.hpp"
#include "vision_oracle.hpp"

namespace epd::model::testing {

std::vector<VqaQuestion> read_vqa(const std::filesystem::path& dir, VqaPick pick, size_t max_scenes) {
  const auto file = dir / "scenes.jsonl";
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot read " + file.string());
  std::vector<VqaQuestion> out;
  std::string line;
  for (int scene = 0; static_cast<size_t>(scene) < max_scenes && std::getline(in, line); ++scene) {
    const auto j = nlohmann::json::parse(line);
    const auto& qs = j.at("questions");
    for (size_t k = 0; k < qs.size(); ++k) {
      if (pick == VqaPick::rotate && k != static_cast<size_t>(scene) % qs.size()) continue;
      out.push_back({dir / j.at("image").get<std::string>(), scene, qs[k].at("type"), qs[k].at("question"),
                     qs[k].at("answer")});
    }
  }
  return out;
}

std::vector<VqaQuestion> picture_first(std::vector<VqaQuestion> questions) {
  for (auto& q : questions) q.picture_first = true;
  return questions;
}

std::string vqa_user_text(const VqaQuestion& q) {
  const std::string marker(kImageMarker);
  return q.picture_first ? marker + q.question : q.question + marker;
}

nlohmann::json vqa_openai_content(const VqaQuestion& q, const std::string& picture_url) {
  const nlohmann::json text = {{"type", "text"}, {"text", q.question}};
  const nlohmann::json picture = {{"type", "image_url"}, {"image_url", {{"url", picture_url}}}};
  return q.picture_first ? nlohmann::json{picture, text} : nlohmann::json{text, picture};
}

std::string vqa_chatml(const VqaQuestion& q) {
  return "<|im_start|>user\n" + vqa_user_text(q) + "<|im_end|>\n<|im_start|>assistant\n";
}

VqaAnswer ask_colocated(ModelRunner& runner, const PromptCodec& codec, const VqaQuestion& q,
                        uint32_t max_tokens) {
  auto image = read_image_file(q.image.string(), max_rgb_bytes_for(runner.config()));
  if (!image) throw std::runtime_error(q.image.string() + ": " + image.error().detail);
  const std::vector<ChatTurn> turns = {{"user", vqa_user_text(q), true}};
  const MediaDims dims[] = {{image->width, image->height}};
  auto prompt = codec.chat(turns, dims);
  if (!prompt) throw std::runtime_error(prompt.error().detail);
  GenerateOptions opts;
  opts.max_tokens = max_tokens;
  opts.stop_tokens.assign(codec.stop_tokens().begin(), codec.stop_tokens().end());
  const Media item = std::move(*image);
  auto r = generate_tokens(runner, *prompt, opts, std::span(&item, 1));
  if (!r) throw std::runtime_error(r.error().detail);
  VqaAnswer a{r->tokens, {}, r->stopped_at_eos};
  if (a.ended) a.tokens.pop_back();
  a.text = codec.text(a.tokens);
  return a;
}

VqaAnswer ask_llama_cpp(const std::string& reference, const std::string& lm, const std::string& mmproj,
                        const PromptCodec& codec, TokenId image_id, const VqaQuestion& q, uint32_t max_tokens,
                        int threads) {
  auto run = run_mtmd_reference(reference, lm, mmproj, {q.image}, vqa_chatml(q), max_tokens, image_id, false,
                                threads);
  VqaAnswer a{std::move(run.generated), {}, false};
  a.text = codec.text(a.tokens);
  return a;
}

void VqaTally::add(const std::string& type, bool right) {
  size_t i = 0;
  while (i < order_.size() && order_[i] != type) ++i;
  if (i == order_.size()) {
    order_.push_back(type);
    cells_.emplace_back();
  }
  ++cells_[i].asked;
  cells_[i].right += right;
}

const VqaTally::Cell* VqaTally::find(const std::string& type) const {
  for (size_t i = 0; i < order_.size(); ++i)
    if (order_[i] == type) return &cells_[i];
  return nullptr;
}

size_t VqaTally::asked(const std::string& type) const {
  const Cell* c = find(type);
  return c ? c->asked : 0;
}

double VqaTally::rate(const std::string& type) const {
  const Cell* c = find(type);
  return c && c->asked ? static_cast<double>(c->right) / static_cast<double>(c->asked) : 0.0;
}

double VqaTally::overall() const {
  size_t asked = 0, right = 0;
  for (const auto& c : cells_) asked += c.asked, right += c.right;
  return asked ? static_cast<double>(right) / static_cast<double>(asked) : 0.0;
}

std::string VqaTally::summary() const {
  std::ostringstream s;
  for (size_t i = 0; i < order_.size(); ++i)
    s << (i ? ", " : "") << order_[i] << " " << cells_[i].right << "/" << cells_[i].asked;
  return s.str();
}

}  // namespace epd::model::testing
