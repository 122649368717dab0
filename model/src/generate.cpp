#include "epd/model/generate.hpp"

#include <chrono>
#include <cstdio>
#include <numeric>
#include <sstream>

namespace epd::model {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Pool memory aligned for any element type, zeroed so unused slots hash the same in every process.
struct PoolBuffer {
  explicit PoolBuffer(uint64_t bytes) : words((bytes + 7) / 8, 0) {}
  std::byte* data() { return reinterpret_cast<std::byte*>(words.data()); }
  std::vector<uint64_t> words;
};

}  // namespace

protocol::Result<GenerateResult> generate(ModelRunner& runner, std::string_view text, const Image* image,
                                          const GenerateOptions& opts) {
  using clock = std::chrono::steady_clock;
  const ModelConfig& cfg = runner.config();
  GenerateResult res;

  Embeddings emb;
  auto t0 = clock::now();
  if (image) {
    auto e = runner.encode(*image);
    if (!e) return e.error();
    emb = std::move(*e);
  }
  res.encode_ms = ms_since(t0);

  auto prompt =
      build_prompt(cfg, text, image ? std::optional<ImageDims>({image->width, image->height}) : std::nullopt);
  if (!prompt) return prompt.error();
  res.prompt = std::move(*prompt);
  const uint32_t n = static_cast<uint32_t>(res.prompt.size());
  const uint32_t max_new = std::min<uint32_t>(opts.max_tokens, cfg.max_seq - n);

  // The sequence owns pages 0..k-1 of a private pool (length + max_new tokens, the last token's K/V is
  // never written, but one spare slot keeps the arithmetic simple).
  KvPool pool;
  pool.layout = kv_layout_for(cfg, std::max<uint32_t>(1, (n + max_new + cfg.page_size - 1) / cfg.page_size),
                              opts.dtype, opts.order);
  PoolBuffer buf(pool.layout.total_bytes());
  pool.base = buf.data();
  std::vector<PageId> pages(pool.layout.num_pages);
  std::iota(pages.begin(), pages.end(), 0);

  t0 = clock::now();
  const uint32_t chunk = opts.chunk == 0 ? n : opts.chunk;
  TokenId next = 0;
  for (uint32_t begin = 0; begin < n; begin += chunk) {
    const uint32_t end = std::min(n, begin + chunk);
    auto r =
        runner.prefill_chunk(pool, pages, begin, slice_prompt(res.prompt, emb.data, cfg.d_model, begin, end));
    if (!r) return r.error();
    next = *r;
  }
  res.prefill_ms = ms_since(t0);

  t0 = clock::now();
  DecodeSeq seq{pages, n, next};
  while (max_new > 0) {
    res.tokens.push_back(seq.last_token);
    if ((opts.stop_at_eos && seq.last_token == kEos) || res.tokens.size() >= max_new) break;
    TokenId out = 0;
    if (auto st = runner.decode_step(pool, {&seq, 1}, {&out, 1}); !st) return st.error();
    seq.length += 1;
    seq.last_token = out;
  }
  res.decode_ms = ms_since(t0);
  res.text = decode_text(res.tokens);
  res.kv_digest = kv_digest(pool, pages);
  return res;
}

std::string to_json(const GenerateResult& r) {
  std::ostringstream os;
  os << "{\"tokens\":[";
  for (size_t i = 0; i < r.tokens.size(); ++i) os << (i ? "," : "") << r.tokens[i];
  os << "],\"text\":\"";
  for (unsigned char c : r.text) {
    if (c == '"' || c == '\\') {
      os << '\\' << c;
    } else if (c < 0x20 || c >= 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      os << buf;
    } else {
      os << c;
    }
  }
  char digest[17];
  std::snprintf(digest, sizeof digest, "%016llx", static_cast<unsigned long long>(r.kv_digest));
  os << "\",\"prompt_tokens\":" << r.prompt.size() << ",\"kv_digest\":\"" << digest << "\""
     << ",\"timings_ms\":{\"encode\":" << r.encode_ms << ",\"prefill\":" << r.prefill_ms
     << ",\"decode\":" << r.decode_ms << "}}";
  return os.str();
}

}  // namespace epd::model
