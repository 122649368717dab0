#pragma once
// Colocated request: encode + chunked prefill + decode in one process, with a private KV pool. Its output
// is the oracle that disaggregated runs are compared against.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "epd/model/runner.hpp"

namespace epd::model {

// A KV layout for one side of the sequence; page_size 0 = the model's.
struct KvLayoutChoice {
  uint32_t page_size = 0;
  DType dtype = DType::f16;  // the roles' default (kv_dtype)
  KvDimOrder order = KvDimOrder::token_head_dim;
};

struct GenerateOptions {
  uint32_t max_tokens = 16;  // generated tokens, including the one prefill returns
  uint32_t chunk = 0;        // prefill chunk size; 0 = whole prompt in one chunk
  bool stop_at_eos = true;
  // What ends a checkpoint's generation (PromptCodec::stop_tokens; empty: only max_tokens). The reference
  // model ends at kEos.
  std::vector<TokenId> stop_tokens;
  SamplingParams sampling;  // greedy by default; token i is drawn with index i, as the roles do
  // A resumed answer: the prompt ends with the first `first_index` tokens drawn before, and the first token
  // drawn here has that index (as a router resumes a handed-over room). max_tokens counts the rest.
  uint32_t first_index = 0;
  // Set: masks every draw (a grammar, epd/model/grammar.hpp) and is told each drawn token that does not end
  // the answer. Owned by the caller, in the state after the answer's first `first_index` tokens.
  TokenConstraint* constraint{};
  DType dtype = DType::f16;  // the roles' default KV element type, so the oracle runs as they do
  KvDimOrder order = KvDimOrder::token_head_dim;
  // Set: mirror the disaggregated staged path. Prefill runs in the pool above (model page size), the prompt's
  // KV is gathered and scattered (converted) once into a second pool with this layout, and decode runs there.
  std::optional<KvLayoutChoice> decode_kv;
  // An M-RoPE model's image grids, one per image in prompt order (PromptCodec::image_grids): where its
  // image rows rotate (epd/model/positions.hpp). Unread for other models.
  std::vector<ImageGrid> image_grids;
};

struct GenerateResult {
  std::vector<TokenId> prompt;
  std::vector<TokenId> tokens;          // generated
  std::vector<TokenLogprobs> logprobs;  // one per token, with opts.sampling.logprobs; else empty
  std::string text;             // decode_text(tokens) for the reference model; a checkpoint's caller decodes
  bool stopped_at_eos = false;  // the last token ended generation (else max_tokens or max_seq)
  uint64_t kv_digest = 0;       // kv_digest() of the sequence's pages in the decode pool after generation
  double encode_ms = 0, prefill_ms = 0, stage_ms = 0, decode_ms = 0;  // stage: gather+scatter (decode_kv)
};

protocol::Result<GenerateResult> generate(ModelRunner& runner, std::string_view text, const Image* image,
                                          const GenerateOptions& opts);

// The same from prompt token ids: how checkpoint models run (their PromptCodec tokenizes, and lays out the
// media, whose rows runner.encode() and encode_audio() give, in order). A checkpoint's generation stops at
// opts.stop_tokens; `text` is filled only for the reference model's byte vocabulary.
protocol::Result<GenerateResult> generate_tokens(ModelRunner& runner, std::vector<TokenId> prompt,
                                                 const GenerateOptions& opts,
                                                 std::span<const Media> media = {});

// {"tokens":[...],"text":"...",["logprobs":[{"logprob":x,"top":[[id,x],...]},...],]"prompt_tokens":N,"stopped_at_eos":B,"kv_digest":"hex","timings_ms":{...}};
// the text is escaped so any byte sequence gives valid JSON (bytes >= 0x80 as \u00XX).
std::string to_json(const GenerateResult& r);

}  // namespace epd::model
