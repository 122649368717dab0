#pragma once
// What the HTTP front end needs from the router: start a generation that streams its tokens back, cancel it,
// list instances, say whether the router can serve. The HTTP layer knows nothing of actors; the router role
// implements this interface on top of its actors, and tests implement it with fakes.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "epd/model/chat.hpp"
#include "epd/model/prompt_codec.hpp"
#include "epd/model/sampling.hpp"
#include "epd/protocol/messages.hpp"

namespace epd::http {

struct GenerateRequest {
  std::string prompt;  // text; ignored when `messages` is set
  // Token ids instead of text (native API only), as given: no BOS added, no template. Non-empty: `prompt`
  // and `messages` are unused.
  std::vector<uint32_t> prompt_tokens;
  std::vector<model::ChatTurn> messages;  // chat: the router applies the model's chat template
  // chat: the tools the template lists for the model (model/chat_tools.hpp); empty: none.
  std::vector<model::ChatTool> tools{};
  // Binary PPMs (P6) and audio clips (model::encode_audio_wav), in order: a chat's items stand at the
  // kImageMarker of their turns, a prompt's go before its text. None = no image or clip.
  std::vector<std::vector<uint8_t>> media;
  uint32_t max_tokens = 16;
  model::SamplingParams sampling;
  // Constrained decoding: a GBNF grammar (llama.cpp's) the answer follows, JSON schemas already converted;
  // empty: none. The router refuses one that does not parse with 400 before any room is made.
  protocol::GrammarSpec grammar{};
  // llama-server's `ignore_eos`: the model's end tokens neither end the answer nor have text; max_tokens
  // (or a stop string) ends it.
  bool ignore_eos = false;
  std::string request_id;  // X-Request-Id: written by every role in the log lines of this request's rooms
};

struct StageTimings {  // milliseconds
  double encode_ms = 0;
  double prefill_ms = 0;
  double transfer_ms = 0;
  double first_token_ms = 0;  // TTFT as seen by the router
  double decode_ms = 0;
  double total_ms = 0;
};

struct GenerateResponse {
  int http_status =
      200;  // 200 on success; 4xx for a bad request; 429 when full; 503/504/502 when serving failed
  std::string error_code;        // protocol error name, e.g. "invalid_request", "timeout"
  std::string error;             // human-readable cause
  uint32_t retry_after_s = 0;    // with 429/503: when to try again
  std::string text;              // the tokens as text (the model's detokenizer), up to the end token
  std::vector<uint32_t> tokens;  // every generated token (also those already streamed)
  // With the request's sampling.logprobs: one per token of `tokens`, each computed where the token was drawn
  // (prefill's first, decode's others; a resumed attempt's from its own draws). Else empty.
  std::vector<model::TokenLogprobs> logprobs;
  bool ended_at_eos = false;  // at an end-of-generation token; else max_tokens (or cut short by the client)
  uint32_t prompt_tokens = 0;
  StageTimings timings;
  uint64_t room = 0;
  uint32_t attempts = 0;
  std::string encoder, prefill, decode;  // instances that served the final attempt
};

// Receives one generation's progress, on the router's thread: token batches in order (each token once,
// however many attempts it took: a retry regenerates the same tokens, and only new ones are passed on),
// then exactly one on_done. Implementations must not block.
class GenerationSink {
 public:
  virtual ~GenerationSink() = default;
  // With the request's sampling.logprobs, right before each on_tokens: its tokens' log-probabilities, one
  // per token. Sinks that ask for none need not override it.
  virtual void on_logprobs(std::span<const model::TokenLogprobs> /*logprobs*/) {}
  virtual void on_tokens(std::span<const uint32_t> tokens) = 0;
  virtual void on_done(GenerateResponse response) = 0;
};

struct InstanceView {
  std::string id;
  std::string role;
  std::string control_endpoint;
  uint64_t incarnation = 0;
  uint64_t last_seen_ms = 0;         // since the registry last heard from it
  protocol::BuildIdentity identity;  // its build, protocol revisions and model (docs/protocol.md)
  // Its last HEARTBEAT's figures (docs/failure-handling.md explains the counters); /v1/instances lists them
  // next to the fields above. Not healthy until a heartbeat says so.
  protocol::LoadReport load{.healthy = false};
};

struct RouterStats {
  uint64_t requests = 0;
  uint64_t completed = 0;
  uint64_t failed = 0;
  uint64_t retries = 0;
  uint64_t resumed = 0;  // retries that went on from the tokens already drawn (docs/failure-handling.md)
  uint64_t resumed_tokens = 0;         // tokens those did not draw again
  uint64_t cancelled = 0;              // the client went away, or a stop sequence ended the answer early
  uint64_t rejected = 0;               // answered 429: in-flight limit and queue full
  uint64_t in_flight = 0;              // requests being served now
  uint64_t queued = 0;                 // requests waiting for an in-flight slot
  uint64_t prompt_backlog_tokens = 0;  // prompt tokens accepted and not yet answered with a first token
  std::optional<double> prompt_tokens_per_s;       // the rate they were answered at lately (none yet: none)
  std::map<std::string, uint64_t> retry_causes;    // error code name -> rooms retried for it
  std::map<std::string, uint64_t> failure_causes;  // error code name -> requests answered with it
  // Sizes of the router's per-request tables (docs/failure-handling.md, "Bounded tables"): 0 when idle.
  std::map<std::string, uint64_t> tables;
};

struct Readiness {
  bool ready = false;
  std::string reason;  // why not, e.g. "no healthy decode instance is registered"
};

class RouterService {
 public:
  virtual ~RouterService() = default;
  // Starts a generation and returns its ticket at once; the sink hears the rest (always, within the router's
  // request timeout). Thread-safe.
  virtual uint64_t generate(GenerateRequest request, std::shared_ptr<GenerationSink> sink) = 0;
  // The client went away or needs no more tokens: stop the work, free its resources. The sink then hears
  // on_done (with the tokens so far) unless it already did. Unknown or finished tickets are ignored.
  virtual void cancel(uint64_t ticket, std::string reason) = 0;
  virtual std::vector<InstanceView> instances() = 0;
  // Calls `done` exactly once, from any thread, with the router's figures (empty ones if the router does
  // not answer). Never blocks the caller: an HTTP I/O thread asks, the router's thread answers.
  virtual void stats(std::function<void(RouterStats)> done) = 0;
  // Whether a request could be placed now: a complete set of healthy instances is registered.
  virtual Readiness readiness() = 0;
  virtual std::string model_id() = 0;  // the name /v1/models lists
  // The served model's prompt codec: the OpenAI routes stream text with it (model::GenerationText).
  // nullptr: the reference model's byte text.
  virtual std::shared_ptr<const model::PromptCodec> codec() { return nullptr; }
};

}  // namespace epd::http
