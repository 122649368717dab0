#pragma once
// Which builds may work together (docs/protocol.md, "Compatibility"). Pure: no I/O, no clocks.
//
// The frame header's version byte is the framing (it has said 1 since the start); what the messages mean is
// the protocol revision, which HELLO carries. Bump kProtocolRevision with every change a peer of the previous
// revision would misread; raise kOldestProtocolRevision when this build stops speaking an old one.
#include <cstdint>
#include <optional>
#include <string>

#include "epd/protocol/messages.hpp"

namespace epd::protocol {

// 4: the first revision HELLO carries (revisions before it were never numbered on the wire).
// 5: SUBMIT carries a list of images (`images`, several per request) instead of one (`image`); a revision-4
//    peer would drop them.
// 6: SUBMIT's `resume_from` (a room that goes on from tokens drawn before) and the error `handed_over`; a
//    revision-5 prefill or decode would draw the resumed tokens at the wrong index.
// 7: BOOTSTRAP's `held_tokens` (decode's prefix cache holds the prompt's first pages); a revision-6 prefill
//    would write those pages, which other rooms read.
// 8: BOOTSTRAP's `held_tokens` may end inside a page, and SUBMIT's `images_key` lets decode cache image
//    pages, `min_p`, `logit_bias_*`, the `*_penalty` fields and `grammar` change the draw, and SUBMIT's
//    `logprobs` and `top_logprobs` ask for log-probabilities (KV_STATUS's `first_logprobs`, TOKENS' and
//    RESULT's `logprobs` carry them); a revision-7 prefill would refuse every room whose held tokens end
//    mid-page, and a revision-7 prefill or decode would draw without the new fields, or report no logprobs.
// 9: a checkpoint's prefill computes on the grid of its chunks from position 0 whatever it had cached, and
//    KV_STATUS's `shareable_tokens` tells decode which of the prompt's K/V its prefix cache may hand to other
//    prompts; a revision-8 prefill computes off the grid and a revision-8 decode caches every page, so a
//    checkpoint's answers could differ from the colocated run's without a word. SUBMIT's `ignore_eos`: a
//    revision-8 decode would end the answer at an end token.
// 10: SUBMIT's `budget_ms`, and prefill's KV_STATUS `transferring` after each chunk it computes: decode waits
//    for a prompt queued at prefill within the request's time left, and for a started one within its
//    waiting_timeout of the last chunk; a revision-9 decode or encoder would fail rooms only queued
//    elsewhere (the 504s on long prompts), so this build speaks 10 only.
// 11: SUBMIT's grammar may be lazy (`grammar_lazy`, `grammar_triggers`, `grammar_trigger_tokens`) or start
//    from the generation prompt (`grammar_prefill`): llama.cpp's tool-call grammars; a revision-10 prefill or
//    decode would constrain a lazy grammar's answer from its first token, or refuse a prefilled grammar's.
// 12: SUBMIT's `image_grids`: where an M-RoPE model's (Qwen2-VL's) image rows rotate. A revision-11 build
//    cannot load such a model, so it never meets one: this build still speaks 11.
inline constexpr uint32_t kProtocolRevision = 12;
inline constexpr uint32_t kOldestProtocolRevision = 11;

struct Incompatibility {
  enum class Kind { protocol, model };
  Kind kind = Kind::protocol;
  std::string reason;  // names both sides' values
};

// "protocol" or "model": the label of the refusal counters.
const char* kind_name(Incompatibility::Kind kind);

// "revisions 4..5 (build g6aec605)"
std::string describe_protocol(const BuildIdentity& id);
// "'tiny' (sha256 1a2b3c4d5e6f)"
std::string describe_model(const BuildIdentity& id);

// Symmetric: both sides reach the same answer. Compatible when the revision ranges
// overlap and the model digests are equal. The names are instance ids, for the reason.
std::optional<Incompatibility> incompatibility(const std::string& our_name, const BuildIdentity& ours,
                                               const std::string& their_name, const BuildIdentity& theirs);

// The identity of a build that serves no model: this build's revision range, nothing else (tests, benches,
// and the default of every membership config).
BuildIdentity current_protocol_identity();

}  // namespace epd::protocol
