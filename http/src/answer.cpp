#include "answer.hpp"

#include <mutex>

#include "epd/http/text_stream.hpp"
#include "epd/model/audio.hpp"
#include "epd/model/grammar.hpp"
#include "epd/model/image_codec.hpp"
#include "epd/model/prompt_codec.hpp"

namespace epd::http {
namespace {

using openai::Endpoint;
using openai::FinishReason;

constexpr const char* kJson = "application/json";

// One answer of n choices. Each choice is a generation of its own (seed + its index), so the router places,
// retries and cancels it alone; choice 0 goes first and the rest start at its first token, when the
// prompt's KV is in the prefix caches it filled. Tokens arrive on the router's thread, the tickets and a
// disconnect on HTTP threads: all state is under one lock. A stop string ends its choice only; a choice
// that fails (after the router's retries) fails the answer and cancels the others.
class Answer final : public std::enable_shared_from_this<Answer> {
 public:
  Answer(std::shared_ptr<ApiContext> ctx, ExchangePtr ex, std::unique_ptr<AnswerShape> shape, bool stream,
         uint32_t n, const std::vector<std::string>& stop, PreparedGeneration prepared)
      : ctx_(std::move(ctx)),
        ex_(std::move(ex)),
        stream_(stream),
        shape_(std::move(shape)),
        logprobs_(prepared.request.sampling.logprobs),
        request_(std::move(prepared.request)),
        parallel_(prepared.parallel_tool_calls) {
    for (uint32_t i = 0; i < n; ++i) {
      choices_.emplace_back(stop, ctx_->service.codec(), request_.ignore_eos, prepared.preserved);
      if (prepared.hermes_tools) choices_.back().calls.emplace(model::ToolFormat::hermes, request_.tools);
      if (prepared.parser) choices_.back().split.emplace(prepared.parser);
    }
  }

  // Starts choice 0 (the rest follow it).
  void start() {
    std::lock_guard lock(mu_);
    launch(0);
  }

  // The client went away: every choice stops, and none starts.
  void disconnected() {
    std::lock_guard lock(mu_);
    gone_ = true;
    for (auto& c : choices_)
      if (c.launched && !c.done) ctx_->service.cancel(c.ticket, "the client disconnected");
  }

  // The router's log-probabilities of the tokens of the next on_tokens.
  void on_logprobs(uint32_t i, std::span<const model::TokenLogprobs> logprobs) {
    std::lock_guard lock(mu_);
    choices_[i].incoming.assign(logprobs.begin(), logprobs.end());
  }

  void on_tokens(uint32_t i, std::span<const uint32_t> tokens) {
    std::lock_guard lock(mu_);
    Choice& c = choices_[i];
    if (answered_ || c.stopped) return;
    for (size_t j = 0; j < tokens.size(); ++j) {
      const uint32_t t = tokens[j];
      ++c.completion_tokens;
      // Each counted token has its entry (a stop string's last token too); it goes out with the next text.
      if (logprobs_)
        c.pending.push_back(entry(t, j < c.incoming.size() ? c.incoming[j] : model::TokenLogprobs{}));
      auto delta = c.text.push(c.tokens_text.push(model::TokenId(t)));
      emit(i, content(c, delta.text));
      if (delta.stopped) {
        c.stop_sequence = c.text.matched_stop();
        stop_early(c);
        break;
      }
    }
    if (i == 0) launch_rest();
  }

  void on_done(uint32_t i, GenerateResponse r) {
    std::lock_guard lock(mu_);
    ctx_->finished();
    Choice& c = choices_[i];
    c.done = true;
    if (answered_) return;
    if (r.http_status != 200 && !c.stopped) return fail(r);
    c.extras.request_id = request_.request_id;
    c.extras.room = r.room;
    c.extras.attempts = r.attempts;
    c.extras.first_token_ms = r.timings.first_token_ms;
    c.extras.total_ms = r.timings.total_ms;
    c.reason = FinishReason::stop;
    if (!c.stopped) {
      // a character the last token left unfinished
      emit(i, content(c, c.text.push(c.tokens_text.finish()).text));
      auto tail = c.text.finish();
      emit(i, content(c, tail.text));
      c.stop_sequence = c.text.matched_stop();
      c.reason = tail.stopped || r.ended_at_eos ? FinishReason::stop : FinishReason::length;
    }
    take_calls(i);
    if (c.split) {
      auto rest = c.split->finish();
      send(i, rest.reasoning, rest.content);
      adopt_calls(c, std::move(c.split->calls()));
    }
    prompt_tokens_ = r.prompt_tokens;
    if (stream_) {
      emit(i, {});  // a stream that produced no text still sends its head and role chunks
      if (!c.tool_calls.empty()) ex_->send(shape_->tool_calls(c.tool_calls, i));
      // Tokens without text left to send (an end token) have their entries in the finish chunk.
      ex_->send(shape_->finish_choice(i, c.reason, c.stop_sequence, c.extras, c.pending));
      c.pending.clear();
    }
    if (i == 0) launch_rest();
    if (++finished_ == choices_.size()) complete(r);
  }

 private:
  struct Choice {
    Choice(const std::vector<std::string>& stop, std::shared_ptr<const model::PromptCodec> codec,
           bool ignore_eos, std::span<const model::TokenId> preserved)
        : text(stop), tokens_text(std::move(codec), ignore_eos, preserved) {}
    TextStream text;                    // stop strings, on the text
    model::GenerationText tokens_text;  // tokens to text, with the model's detokenizer
    std::string body;                   // the answer so far, when not streaming
    // With logprobs: the router's for the tokens of the next on_tokens, and the entries of counted tokens
    // not sent yet (streamed: until a chunk with text carries them; else: the whole answer's).
    std::vector<model::TokenLogprobs> incoming;
    std::vector<openai::TokenLogprob> pending;
    uint64_t ticket = 0;
    bool launched = false, done = false;
    bool stopped = false;  // a stop string was reached; the rest of its tokens are not wanted
    uint32_t completion_tokens = 0;
    FinishReason reason = FinishReason::stop;
    std::string stop_sequence;  // the stop string that ended it
    openai::Extras extras;
    // The reference model with tools: text that could be a Hermes call is held back.
    std::optional<model::ToolCallText> calls;
    std::vector<model::ToolCall> tool_calls;  // the answer's, once it ended
    // A checkpoint's chat with tools or thinking: llama.cpp's parser splits the answer into
    // reasoning_content, content and calls.
    std::optional<model::AnswerSplit> split;
    std::string reasoning_body;  // the reasoning so far, when not streaming
  };

  // The text of a choice that may go out as content now.
  static std::string content(Choice& c, const std::string& text) {
    return c.calls ? c.calls->push(text) : text;
  }

  // The choice ended: what the reference model's Hermes reader held back is either its calls or more
  // content.
  void take_calls(uint32_t i) {
    Choice& c = choices_[i];
    if (!c.calls) return;
    auto end = c.calls->finish();
    emit(i, end.text);
    adopt_calls(c, std::move(end.calls));
  }

  // An answer's calls, each with an id (the format's own when it writes one, as llama-server keeps it).
  // An answer max_tokens cut ends with `length` whatever it holds, as llama-server's (its last call may be
  // unfinished).
  void adopt_calls(Choice& c, std::vector<model::ToolCall> calls) {
    if (calls.empty()) return;
    if (!parallel_) calls.resize(1);
    for (auto& call : calls)
      if (call.id.empty()) call.id = "call_" + random_hex(24);
    c.tool_calls = std::move(calls);
    if (c.reason != FinishReason::length) c.reason = FinishReason::tool_calls;
  }

  // Hears one choice's generation for the answer.
  class Sink final : public GenerationSink {
   public:
    Sink(std::shared_ptr<Answer> answer, uint32_t index) : answer_(std::move(answer)), index_(index) {}
    void on_logprobs(std::span<const model::TokenLogprobs> logprobs) override {
      answer_->on_logprobs(index_, logprobs);
    }
    void on_tokens(std::span<const uint32_t> tokens) override { answer_->on_tokens(index_, tokens); }
    void on_done(GenerateResponse r) override { answer_->on_done(index_, std::move(r)); }

   private:
    std::shared_ptr<Answer> answer_;
    uint32_t index_;
  };

  void launch(uint32_t i) {
    Choice& c = choices_[i];
    GenerateRequest request = request_;
    request.sampling.seed += i;  // choice i answers as a single request with seed + i would
    c.launched = true;
    ctx_->started();
    // Never re-entrant: the router hears of the generation by message, after this returns.
    c.ticket = ctx_->service.generate(std::move(request), std::make_shared<Sink>(shared_from_this(), i));
  }

  void launch_rest() {
    if (rest_launched_ || gone_ || answered_) return;
    rest_launched_ = true;
    for (uint32_t i = 1; i < choices_.size(); ++i) launch(i);
  }

  // Content text of choice i, split into reasoning, content and calls by the template's parser.
  void emit(uint32_t i, const std::string& text) {
    Choice& c = choices_[i];
    if (!c.split) return send(i, {}, text);
    auto d = c.split->push(text);
    send(i, d.reasoning, d.content);
  }

  void send(uint32_t i, const std::string& reasoning, const std::string& text) {
    Choice& c = choices_[i];
    if (!stream_) {
      c.reasoning_body += reasoning;
      c.body += text;
      return;
    }
    if (!headers_sent_) {
      ex_->begin_stream(200, std::string(shape_->stream_type()), {{"X-Request-Id", request_.request_id}});
      ex_->send(shape_->start());
      headers_sent_ = true;
    }
    if (!reasoning.empty()) ex_->send(shape_->reasoning(reasoning, i));
    if (text.empty()) return;
    ex_->send(shape_->text(text, i, c.pending));
    c.pending.clear();
  }

  // A token's logprobs entry: the token and its alternatives as the model's detokenizer spells them.
  openai::TokenLogprob entry(uint32_t token, const model::TokenLogprobs& lp) const {
    openai::TokenLogprob e{{piece(token), lp.logprob}};
    for (const auto& alt : lp.top) e.top.push_back({piece(alt.id), alt.logprob});
    return e;
  }

  // A token's bytes: a checkpoint's piece (special tokens by their text), the reference model's byte.
  std::string piece(uint32_t token) const {
    const auto id = model::TokenId(token);
    return codec_ ? codec_->tokenizer().piece(id, /*render_special=*/true)
                  : model::decode_text(std::span(&id, 1));
  }

  // A stop string ended the choice: its generation stops; the router's answer to the cancel (with the
  // prompt's length and the room) finishes the choice, one actor round trip later.
  void stop_early(Choice& c) {
    c.stopped = true;
    ctx_->service.cancel(c.ticket, "a stop string ended the answer");
  }

  uint32_t completion_tokens() const {
    uint32_t n = 0;
    for (const auto& c : choices_) n += c.completion_tokens;
    return n;
  }

  void note(const GenerateResponse& r, const HttpError* failure) {
    note_finished(*ctx_, shape_->route(), request_.request_id, stream_, r, completion_tokens(), failure);
  }

  void fail(const GenerateResponse& r) {
    answered_ = true;
    const HttpError failure = failure_error(r);
    note(r, &failure);
    for (auto& c : choices_)
      if (c.launched && !c.done) ctx_->service.cancel(c.ticket, "another choice of the answer failed");
    if (headers_sent_) {
      ex_->send(shape_->stream_error(failure));
      ex_->end_stream();
    } else {
      std::vector<HttpHeader> headers{{"X-Request-Id", request_.request_id}};
      if (r.retry_after_s > 0) headers.push_back({"Retry-After", std::to_string(r.retry_after_s)});
      ex_->respond(failure.status, shape_->error_body(failure), kJson, std::move(headers));
    }
  }

  // Noted before the answer goes out, so a client that reads /v1/activity after its answer finds it.
  void complete(const GenerateResponse& last) {
    answered_ = true;
    note(last, nullptr);
    const openai::Usage usage{prompt_tokens_, completion_tokens()};
    if (stream_) {
      ex_->send(shape_->end(usage));
      ex_->end_stream();
      return;
    }
    std::vector<openai::Choice> out;
    for (auto& c : choices_) {
      out.push_back({std::move(c.body), c.reason, c.extras});
      out.back().stop_sequence = std::move(c.stop_sequence);
      if (logprobs_) out.back().logprobs = std::move(c.pending);
      out.back().tool_calls = std::move(c.tool_calls);
      out.back().reasoning_content = std::move(c.reasoning_body);
    }
    ex_->respond(200, shape_->body(out, usage), kJson, {{"X-Request-Id", request_.request_id}});
  }

  std::mutex mu_;
  std::shared_ptr<ApiContext> ctx_;
  ExchangePtr ex_;
  const bool stream_;
  const std::unique_ptr<AnswerShape> shape_;
  const bool logprobs_;  // the request asked for them
  const std::shared_ptr<const model::PromptCodec> codec_ = ctx_->service.codec();
  const GenerateRequest request_;  // choice 0's; choice i's differs in its seed
  std::vector<Choice> choices_;
  uint32_t finished_ = 0;
  uint32_t prompt_tokens_ = 0;
  bool rest_launched_ = false;
  bool gone_ = false;  // the client disconnected
  bool headers_sent_ = false;
  bool answered_ = false;
  const bool parallel_;  // parallel_tool_calls: else only an answer's first call is kept
};

// The chat messages as the model's turns, each image decoded and shipped as PPM; the model's codec decides
// how many it takes.
std::optional<HttpError> to_turns(openai::Request& in, const GenerateLimits& limits, GenerateRequest& out) {
  for (size_t i = 0; i < in.messages.size(); ++i) {
    auto& m = in.messages[i];
    model::ChatTurn turn;
    turn.role = m.role == "developer" ? "system" : m.role;  // OpenAI's newer name for the system turn
    turn.text = std::move(m.text);
    turn.image = !m.media.empty();
    turn.tool_calls = std::move(m.tool_calls);
    turn.tool_call_id = std::move(m.tool_call_id);
    if (out.media.size() + m.media.size() > limits.max_images)
      return HttpError{
          400, "invalid_request",
          "a request may carry at most " + std::to_string(limits.max_images) + " images and audio clips",
          "messages[" + std::to_string(i) + "].content"};
    for (const auto& part : m.media) {
      if (part.audio) {
        auto audio =
            model::decode_audio(part.bytes, uint64_t{limits.max_audio_seconds} * model::kAudioSampleRate);
        if (!audio)
          return HttpError{400, "invalid_request", "audio: " + audio.error().detail,
                           "messages[" + std::to_string(i) + "].content"};
        out.media.push_back(model::encode_audio_wav(*audio));
        continue;
      }
      auto image = model::decode_image(part.bytes, limits.max_image_bytes);
      if (!image)
        return HttpError{400, "invalid_request", "image: " + image.error().detail,
                         "messages[" + std::to_string(i) + "].content"};
      out.media.push_back(model::encode_ppm(*image));
    }
    out.messages.push_back(std::move(turn));
  }
  return std::nullopt;
}

// The request's constraint as GBNF, converted here once (a JSON schema by llama.cpp's converter); the router
// parses the grammar before it makes a room.
std::optional<HttpError> to_grammar(const openai::Constraint& c, GenerateRequest& out) {
  using Kind = openai::Constraint::Kind;
  if (c.kind == Kind::grammar) out.grammar.gbnf = c.text;
  if (c.kind == Kind::json_object) out.grammar.gbnf = model::json_object_grammar();
  if (c.kind == Kind::json_schema) {
    auto g = model::json_schema_grammar(c.text);
    if (!g) return HttpError{400, "invalid_request", g.error().detail, c.param};
    out.grammar.gbnf = std::move(*g);
  }
  return std::nullopt;
}

// The tools in the prompt, unless tool_choice is "none" (then the model is shown none and its answer is
// text). A checkpoint's chat is rendered by llama.cpp's chat layer as llama-server renders it: its grammar
// (lazy for "auto": constraining a call from its first marker on; whole for "required" and a named
// function), its preserved tokens and stop strings, and its parser of the answer. The reference model
// writes and reads Hermes calls itself and takes no grammar.
std::optional<HttpError> to_tools(const openai::Tools& in,
                                  const std::shared_ptr<const model::PromptCodec>& codec,
                                  openai::Request& request, PreparedGeneration& out) {
  using Choice = openai::Tools::Choice;
  const bool with_tools = in.choice != Choice::none && !in.tools.empty();
  if (with_tools) {
    out.request.tools = in.tools;
    out.parallel_tool_calls = in.parallel;
  }
  if (!codec || !codec->chat_template()) {
    if (with_tools && in.choice != Choice::automatic)
      return HttpError{400, "invalid_request",
                       "a forced tool call needs a grammar, and the reference model takes none "
                       "(tool_choice \"auto\" lets it call)",
                       "tool_choice"};
    out.hermes_tools = with_tools;
    return std::nullopt;
  }
  model::ToolUse use;
  use.choice =
      in.choice == Choice::automatic ? model::ToolUse::Choice::automatic : model::ToolUse::Choice::required;
  if (in.choice == Choice::named) use.named = in.named;
  use.parallel = in.parallel;
  auto rendered = codec->render(out.request.messages, out.request.tools, use);
  if (!rendered) {
    // The template refuses the conversation (raise_exception), or a tool schema llama.cpp cannot convert.
    if (rendered.error().code != protocol::ErrorCode::invalid_request)
      return std::nullopt;  // the router says
    return HttpError{400, "invalid_request", rendered.error().detail, with_tools ? "tools" : "messages"};
  }
  if (with_tools || rendered->supports_thinking) out.parser = rendered->parser;
  if (!with_tools) return std::nullopt;
  auto constraint = model::tool_constraint(*rendered, codec->tokenizer());
  if (!constraint) return HttpError{400, "invalid_request", "tools: " + constraint.error().detail, "tools"};
  if (!constraint->grammar.empty() && !out.request.grammar.empty())
    return HttpError{400, "invalid_request",
                     "a grammar or a JSON response format cannot be combined with tools that constrain the "
                     "answer (tool_choice \"none\" shows the model no tools)",
                     "tools"};
  if (!constraint->grammar.empty()) out.request.grammar = std::move(constraint->grammar);
  out.preserved = std::move(constraint->preserved);
  for (const std::string& s : constraint->stops)
    if (std::find(request.stop.begin(), request.stop.end(), s) == request.stop.end())
      request.stop.push_back(s);
  return std::nullopt;
}

}  // namespace

openai::Limits request_limits(const ApiContext& ctx) {
  const auto& g = ctx.config.generate;
  openai::Limits limits;
  limits.max_prompt_bytes = g.max_prompt_bytes;
  limits.max_image_bytes = g.max_image_bytes;
  limits.max_audio_bytes = g.max_audio_bytes;
  limits.default_max_tokens = g.default_max_tokens;
  limits.max_tokens_limit = g.max_tokens_limit;
  limits.max_json_depth = g.max_json_depth;
  return limits;
}

std::optional<HttpError> prepare_generation(ApiContext& ctx, openai::Request& in, std::string request_id,
                                            PreparedGeneration& out) {
  const std::string model = ctx.service.model_id();
  if (!in.model.empty() && in.model != model)
    return HttpError{404, "model_not_found",
                     "the model '" + in.model + "' is not served here; GET /v1/models lists '" + model + "'",
                     "model"};
  GenerateRequest& request = out.request;
  request.request_id = std::move(request_id);
  request.max_tokens = in.max_tokens;
  request.sampling = in.sampling;
  request.ignore_eos = in.ignore_eos;
  if (auto bad = model::validate(request.sampling); !bad)
    return HttpError{400, "invalid_request", bad.error().detail};
  if (auto err = to_grammar(in.constraint, request)) return err;
  if (in.endpoint != Endpoint::chat) {
    request.prompt = std::move(in.prompt);
    return std::nullopt;
  }
  if (auto err = to_turns(in, ctx.config.generate, request)) return err;
  // A template that thinks (Qwen3, DeepSeek-R1, ...) or tools: the parser reads the thinking and the calls
  // out of the answer as llama-server does (reasoning_content, tool_calls).
  return to_tools(in.tools, ctx.service.codec(), in, out);
}

void start_answer(const std::shared_ptr<ApiContext>& ctx, ExchangePtr ex, std::unique_ptr<AnswerShape> shape,
                  const openai::Request& in, PreparedGeneration prepared) {
  auto answer =
      std::make_shared<Answer>(ctx, ex, std::move(shape), in.stream, in.n, in.stop, std::move(prepared));
  answer->start();
  ex->on_disconnect([answer] { answer->disconnected(); });
}

}  // namespace epd::http
