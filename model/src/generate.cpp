#include "epd/model/generate.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <sstream>
#include <string>

#include "epd/model/chunk_grid.hpp"
#include "epd/model/kv_staging.hpp"
#include "epd/model/mmproj.hpp"

namespace epd::model {

PrefillChunk slice_prompt(std::span<const TokenId> prompt, std::span<const float> embeddings, uint32_t dim,
                          uint32_t begin, uint32_t end, TokenId image) {
  begin = std::min<uint32_t>(begin, prompt.size());
  end = std::clamp<uint32_t>(end, begin, prompt.size());
  const auto toks = prompt.subspan(begin, end - begin);
  const size_t before = std::count(prompt.begin(), prompt.begin() + begin, image);
  const size_t inside = std::count(toks.begin(), toks.end(), image);
  const size_t lo = std::min(before * dim, embeddings.size());
  const size_t len = std::min(inside * dim, embeddings.size() - lo);
  return PrefillChunk{toks, embeddings.subspan(lo, len)};
}

std::vector<protocol::Result<TokenId>> ModelRunner::prefill_batch(const KvPool& pool,
                                                                  std::span<const PrefillPiece> pieces) {
  std::vector<protocol::Result<TokenId>> out;
  out.reserve(pieces.size());
  for (const PrefillPiece& p : pieces) out.push_back(prefill_chunk(pool, p.pages, p.start, p.chunk));
  return out;
}

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// A private pool whose memory is aligned for any element type and zeroed, so unused slots hash the same
// in every process.
struct OwnedPool {
  OwnedPool(const ModelConfig& cfg, uint32_t tokens, DType dtype, KvDimOrder order, uint32_t page_size) {
    pool.layout = kv_layout_for(cfg, 1, dtype, order, page_size);
    pool.layout.num_pages = std::max<uint32_t>(1, pages_for(pool.layout, tokens));
    words.assign((pool.layout.total_bytes() + 7) / 8, 0);
    pool.base = reinterpret_cast<std::byte*>(words.data());
    pages.resize(pool.layout.num_pages);
    std::iota(pages.begin(), pages.end(), 0);
  }
  OwnedPool(const OwnedPool&) = delete;  // pool.base points into words
  OwnedPool& operator=(const OwnedPool&) = delete;
  std::vector<uint64_t> words;
  KvPool pool;
  std::vector<PageId> pages;  // the sequence owns every page, in order
};

}  // namespace

// Prefill, optional staging and decode of res.prompt; fills res.
static protocol::Status run_prompt(ModelRunner& runner, GenerateResult& res, const Embeddings& emb,
                                   const GenerateOptions& opts);

protocol::Result<GenerateResult> generate(ModelRunner& runner, std::string_view text, const Image* image,
                                          const GenerateOptions& opts) {
  using clock = std::chrono::steady_clock;
  const ModelConfig& cfg = runner.config();
  GenerateResult res;
  // Checked before any work: the decode pool is sized from it.
  if (opts.decode_kv && opts.decode_kv->page_size > kMaxPageSize)
    return protocol::make_error(protocol::ErrorCode::invalid_request,
                                "decode KV page size " + std::to_string(opts.decode_kv->page_size) +
                                    " outside 1.." + std::to_string(kMaxPageSize));

  if (auto st = validate(opts.sampling); !st) return st.error();

  Embeddings emb;
  auto t0 = clock::now();
  if (image) {
    auto e = runner.encode(*image);
    if (!e) return e.error();
    emb = std::move(*e);
  }
  res.encode_ms = ms_since(t0);

  auto prompt =
      build_prompt(cfg, text, image ? std::optional<MediaDims>({image->width, image->height}) : std::nullopt);
  if (!prompt) return prompt.error();
  res.prompt = std::move(*prompt);
  if (auto st = run_prompt(runner, res, emb, opts); !st) return st.error();
  return res;
}

protocol::Result<GenerateResult> generate_tokens(ModelRunner& runner, std::vector<TokenId> prompt,
                                                 const GenerateOptions& opts, std::span<const Media> media) {
  const ModelConfig& cfg = runner.config();
  if (opts.decode_kv && opts.decode_kv->page_size > kMaxPageSize)
    return protocol::make_error(protocol::ErrorCode::invalid_request,
                                "decode KV page size " + std::to_string(opts.decode_kv->page_size) +
                                    " outside 1.." + std::to_string(kMaxPageSize));
  if (auto st = validate(opts.sampling); !st) return st.error();
  if (prompt.empty()) return protocol::make_error(protocol::ErrorCode::invalid_request, "empty prompt");
  if (prompt.size() >= cfg.max_seq)
    return protocol::make_error(protocol::ErrorCode::invalid_request,
                                "prompt of " + std::to_string(prompt.size()) +
                                    " tokens leaves no room in max_seq " + std::to_string(cfg.max_seq));
  GenerateResult res;
  Embeddings emb;
  const auto t0 = std::chrono::steady_clock::now();
  for (const Media& item : media) {
    auto e = encode_media(runner, item);
    if (!e) return e.error();
    emb.dim = e->dim;
    emb.tokens += e->tokens;
    emb.data.insert(emb.data.end(), e->data.begin(), e->data.end());
  }
  res.encode_ms = ms_since(t0);
  res.prompt = std::move(prompt);
  if (auto st = run_prompt(runner, res, emb, opts); !st) return st.error();
  return res;
}

static protocol::Status run_prompt(ModelRunner& runner, GenerateResult& res, const Embeddings& emb,
                                   const GenerateOptions& opts) {
  using clock = std::chrono::steady_clock;
  const ModelConfig& cfg = runner.config();
  const bool reference = cfg.checkpoint.empty();
  const uint32_t n = static_cast<uint32_t>(res.prompt.size());
  const uint32_t max_new = std::min<uint32_t>(opts.max_tokens, cfg.max_seq - n);

  // The sequence owns all pages of a private pool sized for length + max_new tokens (the last token's K/V
  // is never written, but one spare slot keeps the arithmetic simple).
  OwnedPool prefill_pool(cfg, n + max_new, opts.dtype, opts.order, 0);
  const KvPool& pool = prefill_pool.pool;
  const std::vector<PageId>& pages = prefill_pool.pages;

  auto t0 = clock::now();
  // The chunks of the grid, and a resumed answer's tokens as decode computed them: what prefill does.
  const ChunkGrid grid(cfg, opts.chunk);
  TokenId next = 0;
  TokenLogprobs next_logprobs;  // the drawn token's, with opts.sampling.logprobs
  PrefillChunk draw;
  draw.sampling = opts.sampling;
  draw.generated = opts.first_index;
  draw.logprobs = &next_logprobs;
  draw.constraint = opts.constraint;
  PromptPositions positions;
  if (cfg.mrope) {
    auto made = PromptPositions::make(res.prompt, image_token(cfg).value_or(kImage), opts.image_grids);
    if (!made) return made.error();
    positions = std::move(*made);
    draw.positions = &positions;
  }
  for (uint32_t begin = 0; begin < n;) {
    const ChunkGrid::Piece piece = grid.next_piece(begin, res.prompt, opts.first_index);
    auto r = compute_piece(runner, pool, pages, piece, res.prompt, emb.data, draw);
    if (!r) return r.error();
    next = *r;
    begin = piece.end;
  }
  res.prefill_ms = ms_since(t0);

  // Staged path: the prompt's KV crosses into decode's layout once, as the disaggregated roles do it.
  std::optional<OwnedPool> decode_pool;
  if (opts.decode_kv) {
    t0 = clock::now();
    const KvLayoutChoice& c = *opts.decode_kv;
    decode_pool.emplace(cfg, n + max_new, c.dtype, c.order, c.page_size);
    std::vector<uint64_t> staging((n * staging_token_bytes(pool.layout) + 7) / 8);
    auto* buf = reinterpret_cast<std::byte*>(staging.data());
    if (auto st = gather_tokens(pool, pages, 0, n, buf); !st) return st.error();
    if (auto st = scatter_tokens(decode_pool->pool, decode_pool->pages, 0, n, buf, pool.layout); !st)
      return st.error();
    res.stage_ms = ms_since(t0);
  }
  const KvPool& dpool = decode_pool ? decode_pool->pool : pool;
  const std::vector<PageId>& dpages = decode_pool ? decode_pool->pages : pages;

  t0 = clock::now();
  DecodeSeq seq{dpages, n, next, opts.sampling, opts.first_index + 1};
  seq.constraint = opts.constraint;
  seq.position_lag = positions.lag();
  // The penalties read prompt + answer through last_token, contiguous; kept only when they are on.
  std::vector<TokenId> history;
  if (opts.sampling.penalized()) history = res.prompt;
  while (max_new > 0) {
    res.tokens.push_back(seq.last_token);
    if (opts.sampling.logprobs) res.logprobs.push_back(std::move(next_logprobs));
    if (opts.sampling.penalized()) {
      history.push_back(seq.last_token);
      seq.history = history;
    }
    const bool ends = reference ? seq.last_token == kEos
                                : std::find(opts.stop_tokens.begin(), opts.stop_tokens.end(),
                                            seq.last_token) != opts.stop_tokens.end();
    if (opts.stop_at_eos && ends) {
      res.stopped_at_eos = true;
      break;
    }
    if (res.tokens.size() >= max_new) break;
    if (opts.constraint)
      if (auto st = opts.constraint->accept(seq.last_token); !st) return st.error();
    TokenId out = 0;
    if (auto st = runner.decode_step(dpool, {&seq, 1}, {&out, 1}, {&next_logprobs, 1}); !st)
      return st.error();
    seq.length += 1;
    seq.generated += 1;
    seq.last_token = out;
  }
  res.decode_ms = ms_since(t0);
  if (reference) res.text = decode_text(res.tokens);
  res.kv_digest = kv_digest(dpool, dpages);
  return {};
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
  os << "\"";
  if (!r.logprobs.empty()) {
    // Nine significant digits read back as the same float, so a test can compare exact values.
    auto num = [&](float v) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
      os << buf;
    };
    os << ",\"logprobs\":[";
    for (size_t i = 0; i < r.logprobs.size(); ++i) {
      os << (i ? "," : "") << "{\"logprob\":";
      num(r.logprobs[i].logprob);
      os << ",\"top\":[";
      for (size_t j = 0; j < r.logprobs[i].top.size(); ++j) {
        os << (j ? "," : "") << "[" << r.logprobs[i].top[j].id << ",";
        num(r.logprobs[i].top[j].logprob);
        os << "]";
      }
      os << "]}";
    }
    os << "]";
  }
  os << ",\"prompt_tokens\":" << r.prompt.size()
     << ",\"stopped_at_eos\":" << (r.stopped_at_eos ? "true" : "false") << ",\"kv_digest\":\"" << digest
     << "\""
     << ",\"timings_ms\":{\"encode\":" << r.encode_ms << ",\"prefill\":" << r.prefill_ms
     << ",\"stage\":" << r.stage_ms << ",\"decode\":" << r.decode_ms << "}}";
  return os.str();
}

}  // namespace epd::model
