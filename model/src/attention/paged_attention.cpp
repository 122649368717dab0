#include "attention/paged_attention.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/kernels.hpp"
#include "kernels/multiversion.hpp"

namespace epd::model::detail {

namespace k = kernels;

protocol::Status check_pages(const KvLayout& l, std::span<const PageId> pages, uint64_t end) {
  using protocol::ErrorCode;
  const uint64_t need = pages_for(l, end);
  if (need > pages.size())
    return protocol::make_error(ErrorCode::invalid_request, "sequence needs " + std::to_string(need) +
                                                                " KV pages, page table has " +
                                                                std::to_string(pages.size()));
  for (uint64_t i = 0; i < need; ++i)
    if (pages[i] >= l.num_pages)
      return protocol::make_error(ErrorCode::invalid_request, "KV page index " + std::to_string(pages[i]) +
                                                                  " outside pool of " +
                                                                  std::to_string(l.num_pages) + " pages");
  return {};
}

RopeTable::RopeTable(const ModelConfig& cfg) : half_(cfg.head_dim / 2) {
  cos_.resize(size_t{cfg.max_seq} * half_);
  sin_.resize(size_t{cfg.max_seq} * half_);
  for (size_t pos = 0; pos < cfg.max_seq; ++pos)
    for (size_t i = 0; i < half_; ++i) {
      const double freq = std::pow(double{cfg.rope_theta}, -2.0 * double(i) / double(cfg.head_dim));
      const double a = double(pos) * freq;
      cos_[pos * half_ + i] = static_cast<float>(std::cos(a));
      sin_[pos * half_ + i] = static_cast<float>(std::sin(a));
    }
}

void rope_and_store(const ModelConfig& cfg, const RopeTable& rope, const KvView& kv, uint32_t layer,
                    const RowTarget& row, float* q, float* k, const float* v) {
  const size_t hd = cfg.head_dim;
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float* c = rope.cos(row.pos);
  const float* s = rope.sin(row.pos);
  for (uint32_t hq = 0; hq < cfg.heads; ++hq) {
    float* qh = q + hq * hd;
    k::rope(qh, c, s, hd);
    for (size_t i = 0; i < hd; ++i) qh[i] *= q_scale;
  }
  for (uint32_t hk = 0; hk < cfg.kv_heads; ++hk) k::rope(k + hk * hd, c, s, hd);
  const uint32_t ps = kv.layout().page_size;  // the pool's, which may differ from cfg.page_size
  const PageId page = row.pages[row.pos / ps];
  kv.store(layer, 0, page, row.pos % ps, k);
  kv.store(layer, 1, page, row.pos % ps, v);
}

EPD_MULTIVERSION void attend_group(const ModelConfig& cfg, const KvView& kv, uint32_t layer,
                                   const RowTarget& row, uint32_t g, const float* q, float* out,
                                   AttentionScratch& sc) {
  const size_t hd = cfg.head_dim, len = size_t{row.pos} + 1, group = cfg.heads / cfg.kv_heads;
  const uint32_t ps = kv.layout().page_size;
  sc.scores.resize(group * len);
  sc.conv.resize(hd);
  float* scores = sc.scores.data();
  const float* qg = q + size_t{g} * group * hd;
  for (size_t p = 0; p < len; ++p) {
    const float* kp = kv.load(layer, 0, row.pages[p / ps], p % ps, g, sc.conv.data());
    for (size_t j = 0; j < group; ++j) scores[j * len + p] = k::dot(qg + j * hd, kp, hd);
  }
  float* og = out + size_t{g} * group * hd;
  std::fill(og, og + group * hd, 0.0f);
  for (size_t j = 0; j < group; ++j) {
    float* s = &scores[j * len];
    float m = s[0];
    for (size_t p = 1; p < len; ++p) m = std::max(m, s[p]);
    for (size_t p = 0; p < len; ++p) s[p] = k::exp_det(s[p] - m);
  }
  for (size_t p = 0; p < len; ++p) {
    const float* vp = kv.load(layer, 1, row.pages[p / ps], p % ps, g, sc.conv.data());
    for (size_t j = 0; j < group; ++j) k::axpy(scores[j * len + p], vp, og + j * hd, hd);
  }
  for (size_t j = 0; j < group; ++j) {
    const float inv = 1.0f / k::sum(&scores[j * len], len);
    for (size_t i = 0; i < hd; ++i) og[j * hd + i] *= inv;
  }
}

}  // namespace epd::model::detail
