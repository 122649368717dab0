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

RopeTable::RopeTable(const RopeSpec& spec, uint32_t head_dim, uint32_t max_seq)
    : style_(spec.style), half_((spec.dims ? spec.dims : head_dim) / 2) {
  const double dims = double(2 * half_);
  cos_.resize(size_t{max_seq} * half_);
  sin_.resize(size_t{max_seq} * half_);
  // YaRN's correction range in pairs (ggml_rope_yarn_corr_dims): the pairs that turn fewer than beta_fast
  // (beta_slow) times over the original context are interpolated (extrapolated) in full.
  double low = 0, high = 0;
  if (spec.ext_factor != 0.0) {
    const auto corr = [&](double rotations) {
      return dims * std::log(double(spec.n_ctx_orig) / (rotations * 2 * M_PI)) / (2 * std::log(spec.base));
    };
    low = std::max(0.0, std::floor(corr(spec.beta_fast)));
    high = std::min(dims - 1, std::ceil(corr(spec.beta_slow)));
  }
  double mscale = spec.attn_factor;
  if (spec.ext_factor != 0.0) mscale *= 1.0 + 0.1 * std::log(1.0 / spec.freq_scale);
  for (size_t pos = 0; pos < max_seq; ++pos)
    for (size_t i = 0; i < half_; ++i) {
      const double ff = spec.freq_factors.empty() ? 1.0 : double(spec.freq_factors[i]);
      const double freq = std::pow(spec.base, -2.0 * double(i) / dims) / ff;
      const double extrap = double(pos) * freq;
      double a = spec.freq_scale * extrap;
      if (spec.ext_factor != 0.0) {
        const double y = (double(i) - low) / std::max(0.001, high - low);
        const double ramp = (1 - std::min(1.0, std::max(0.0, y))) * spec.ext_factor;
        a = a * (1 - ramp) + extrap * ramp;
      }
      cos_[pos * half_ + i] = static_cast<float>(std::cos(a) * mscale);
      sin_[pos * half_ + i] = static_cast<float>(std::sin(a) * mscale);
    }
  if (spec.multi()) {
    // ggml_mrope_cache_init: pair i's sector is i modulo the sections' sum; a sector's section picks the
    // component (t, y, x, e).
    const auto& sec = spec.sections;
    const size_t sum = sec[0] + sec[1] + sec[2] + sec[3];
    component_.resize(half_);
    for (size_t i = 0; i < half_; ++i) {
      const size_t sector = i % sum;
      component_[i] = sector < sec[0]                     ? 0
                      : sector < sec[0] + sec[1]          ? 1
                      : sector < sec[0] + sec[1] + sec[2] ? 2
                                                          : 3;
    }
  }
}

void RopeTable::apply(float* head, const Angles& a) const {
  if (style_ == RopeStyle::neox)
    k::rope_neox(head, a.cos, a.sin, 2 * half_);
  else
    k::rope(head, a.cos, a.sin, 2 * half_);
}

RopeTable::Angles RopeTable::angles(const RopePosition& pos, std::span<float> scratch) const {
  if (component_.empty()) return {cos(pos.t), sin(pos.t)};
  const uint32_t p[4] = {pos.t, pos.y, pos.x, pos.e};
  float *c = scratch.data(), *s = c + half_;
  for (size_t i = 0; i < half_; ++i) {
    const size_t at = size_t{p[component_[i]]} * half_ + i;
    c[i] = cos_[at];
    s[i] = sin_[at];
  }
  return {c, s};
}

void rope_and_store(const ModelConfig& cfg, const RopeTable& rope, float q_scale, const KvView& kv,
                    uint32_t layer, const RowTarget& row, float* q, float* k, const float* v) {
  const size_t hd = cfg.head_dim;
  float scratch[1024];  // M-RoPE's gathered angles: head_dim <= 1024 (validate())
  const RopeTable::Angles a = rope.angles(row.rope, scratch);
  for (uint32_t hq = 0; hq < cfg.heads; ++hq) {
    float* qh = q + hq * hd;
    rope.apply(qh, a);
    for (size_t i = 0; i < hd; ++i) qh[i] *= q_scale;
  }
  for (uint32_t hk = 0; hk < cfg.kv_heads; ++hk) rope.apply(k + hk * hd, a);
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
