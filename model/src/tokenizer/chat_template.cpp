#include "epd/model/chat_template.hpp"

#include <algorithm>
#include <cctype>
#include <exception>
#include <optional>
#include <utility>

#include "llama_chat.hpp"

namespace epd::model {
namespace {

protocol::Error invalid(std::string detail) {
  return protocol::make_error(protocol::ErrorCode::invalid_request, std::move(detail));
}

protocol::Status check_turns(std::span<const ChatTurn> turns) {
  if (turns.empty()) return invalid("chat: no messages");
  for (size_t i = 0; i < turns.size(); ++i) {
    const ChatTurn& t = turns[i];
    if (!t.tool_calls.empty() && t.role != "assistant")
      return invalid("chat message " + std::to_string(i) + ": only assistant messages carry tool calls");
    if (t.role != "system" && t.role != "user" && t.role != "assistant" && t.role != "tool")
      return invalid("chat message " + std::to_string(i) + ": role '" + t.role +
                     "' is not supported (system, user, assistant or tool)");
    if ((t.image || t.text.find(kImageMarker) != std::string::npos) && t.role != "user")
      return invalid("chat message " + std::to_string(i) + ": only user messages may carry an image");
  }
  return {};
}

// Whether `text` holds the spelling of a control token (it encodes otherwise with special parsing).
bool has_control_spelling(const Tokenizer& tok, std::string_view text) {
  auto with = tok.encode(text, true), without = tok.encode(text, false);
  return with && without && *with != *without;
}

// Without input marks (llama.cpp rendered the template another way than its generic path, e.g. GPT-OSS's
// or Gemma-4's own handlers): request text that spells a control token is refused, as it could forge a turn.
protocol::Status check_request_text(const Tokenizer& tok, std::span<const ChatTurn> turns,
                                    std::span<const ChatTool> tools) {
  for (size_t i = 0; i < turns.size(); ++i) {
    bool forged = has_control_spelling(tok, turns[i].text);
    for (const ToolCall& c : turns[i].tool_calls)
      forged = forged || has_control_spelling(tok, c.name) || has_control_spelling(tok, c.arguments);
    if (forged)
      return invalid("chat message " + std::to_string(i) +
                     ": spells one of the model's control tokens, which this template cannot keep as text");
  }
  for (const ChatTool& t : tools)
    if (has_control_spelling(tok, t.json))
      return invalid("tool " + t.name + ": spells one of the model's control tokens");
  return {};
}

// Splits text at image markers (only inside request text when `literal`).
void add_text(std::vector<ChatSegment>& out, std::string_view s, bool literal) {
  if (s.empty()) return;
  if (literal) {
    for (size_t m; (m = s.find(kImageMarker)) != std::string_view::npos;
         s.remove_prefix(m + kImageMarker.size())) {
      add_text(out, s.substr(0, m), true);
      out.push_back({std::string(kImageMarker), false, true});
    }
    if (s.empty()) return;
  }
  if (!out.empty() && !out.back().image && out.back().literal == literal)
    out.back().text += s;
  else
    out.push_back({std::string(s), literal, false});
}

}  // namespace

ChatAnswerParser::ChatAnswerParser(std::shared_ptr<const llama_chat::Parser> parser)
    : parser_(std::move(parser)) {}

std::string ChatAnswerParser::format_name() const {
  return parser_->format_name();
}

protocol::Result<ChatAnswer> ChatAnswerParser::parse(std::string_view answer, bool partial) const {
  std::string error;
  auto a = parser_->parse(std::string(answer), partial, &error);
  if (!a) return invalid("the answer does not match the chat format " + format_name() + ": " + error);
  ChatAnswer out{std::move(a->content), std::move(a->reasoning_content), {}};
  for (auto& c : a->calls)
    out.tool_calls.push_back({std::move(c.id), std::move(c.name), std::move(c.arguments)});
  return out;
}

AnswerSplit::AnswerSplit(std::shared_ptr<const ChatAnswerParser> parser) : parser_(std::move(parser)) {}

AnswerSplit::Delta AnswerSplit::push(std::string_view text) {
  if (text.empty()) return {};
  raw_ += text;
  return advance(true);
}

AnswerSplit::Delta AnswerSplit::finish() {
  return advance(false);
}

AnswerSplit::Delta AnswerSplit::advance(bool partial) {
  auto parsed = parser_->parse(raw_, partial);
  ChatAnswer a = parsed ? std::move(*parsed) : ChatAnswer{raw_, {}, {}};
  if (!parsed && !reasoning_.empty()) return {};  // thinking went out already: nothing sure to add
  Delta d;
  auto grow = [](std::string& sent, const std::string& now, std::string& out) {
    if (now.size() > sent.size() && now.compare(0, sent.size(), sent) == 0) {
      out = now.substr(sent.size());
      sent = now;
    }
  };
  grow(reasoning_, a.reasoning_content, d.reasoning);
  grow(content_, a.content, d.content);
  if (!partial) calls_ = std::move(a.tool_calls);
  return d;
}

namespace {

// llama.cpp's regex_escape (common.cpp): a word trigger matched as text.
std::string regex_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::string_view(".^$|()*+?[]{}\\").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

std::optional<TokenId> single_token(const Tokenizer& tok, const std::string& text) {
  auto ids = tok.encode(text, /*parse_special=*/true);
  if (!ids || ids->size() != 1) return std::nullopt;
  return ids->front();
}

}  // namespace

std::vector<TokenId> preserved_ids(const ChatGrammar& g, const Tokenizer& tok) {
  std::vector<TokenId> out;
  for (const std::string& t : g.preserved_tokens)
    if (auto id = single_token(tok, t)) out.push_back(*id);
  return out;
}

protocol::Result<protocol::GrammarSpec> grammar_spec(const ChatGrammar& g, const Tokenizer& tok) {
  protocol::GrammarSpec spec;
  if (g.gbnf.empty()) return spec;
  spec.gbnf = g.gbnf;
  spec.lazy = g.lazy;
  const std::vector<TokenId> preserved = preserved_ids(g, tok);
  for (const GrammarTrigger& t : g.triggers) {
    switch (t.kind) {
      case GrammarTrigger::Kind::word:
        if (auto id = single_token(tok, t.value)) {
          if (std::find(preserved.begin(), preserved.end(), *id) == preserved.end())
            return invalid("grammar trigger word " + t.value + " is one token that is not preserved");
          spec.trigger_tokens.push_back(*id);
        } else {
          spec.trigger_patterns.push_back(regex_escape(t.value));
        }
        break;
      case GrammarTrigger::Kind::pattern:
        spec.trigger_patterns.push_back(t.value);
        break;
      case GrammarTrigger::Kind::pattern_full:
        spec.trigger_patterns.push_back(t.value.empty() ? "^$"
                                                        : (t.value.front() != '^' ? "^" : "") + t.value +
                                                              (t.value.back() != '$' ? "$" : ""));
        break;
    }
  }
  if (!g.lazy && !g.generation_prompt.empty()) {
    auto ids = tok.encode(g.generation_prompt, /*parse_special=*/true);
    if (!ids) return ids.error();
    for (size_t i = 0; i < ids->size(); ++i) {
      const std::string piece = tok.piece((*ids)[i], /*render_special=*/true);
      // Some tokenizers put a space before the first special token (llama.cpp drops it the same way).
      if (i == 0 && !piece.empty() && std::isspace(static_cast<unsigned char>(piece[0])) &&
          !std::isspace(static_cast<unsigned char>(g.generation_prompt[0])))
        continue;
      spec.prefill.push_back((*ids)[i]);
    }
  }
  return spec;
}

protocol::Result<ToolConstraint> tool_constraint(const RenderedChat& r, const Tokenizer& tok) {
  auto spec = grammar_spec(r.grammar, tok);
  if (!spec) return spec.error();
  return ToolConstraint{std::move(*spec), preserved_ids(r.grammar, tok), r.additional_stops};
}

ChatTemplate::~ChatTemplate() = default;

protocol::Result<std::shared_ptr<const ChatTemplate>> ChatTemplate::make(std::string_view jinja,
                                                                         std::string bos, std::string eos) {
  auto t = std::shared_ptr<ChatTemplate>(new ChatTemplate());
  try {
    t->impl_ = llama_chat::make_templates(std::string(jinja), bos, eos);
  } catch (const std::exception& e) {
    return protocol::make_error(protocol::ErrorCode::config_error, e.what());
  }
  t->source_ = std::string(jinja);
  return std::shared_ptr<const ChatTemplate>(std::move(t));
}

protocol::Result<std::shared_ptr<const ChatTemplate>> ChatTemplate::make(std::string_view jinja,
                                                                         const Tokenizer& tok) {
  return make(jinja, tok.bos() ? tok.piece(*tok.bos(), true) : "",
              tok.eos() ? tok.piece(*tok.eos(), true) : "");
}

bool ChatTemplate::supports(std::string_view capability) const {
  return impl_->supports(std::string(capability));
}

protocol::Result<RenderedChat> ChatTemplate::render(std::span<const ChatTurn> turns,
                                                    std::span<const ChatTool> tools, const ToolUse& use,
                                                    bool enable_thinking, const Tokenizer* tok) const {
  if (auto st = check_turns(turns); !st) return st.error();
  std::vector<llama_chat::Message> messages;
  for (const ChatTurn& t : turns) {
    llama_chat::Message m{t.role, t.text, {}, t.tool_call_id, {}};
    for (const ToolCall& c : t.tool_calls) m.calls.push_back({c.id, c.name, c.arguments});
    messages.push_back(std::move(m));
  }
  std::vector<std::string> tool_json, named_json;
  for (const ChatTool& t : tools) {
    tool_json.push_back(t.json);
    if (t.name == use.named) named_json.push_back(t.json);
  }
  if (!use.named.empty() && named_json.empty())
    return invalid("tool_choice names " + use.named + ", which is not one of the tools");
  const auto choice = use.choice == ToolUse::Choice::required ? llama_chat::ToolChoice::required
                                                              : llama_chat::ToolChoice::automatic;
  llama_chat::Rendered r, calls;
  try {
    r = impl_->apply(messages, tool_json, choice, use.parallel, enable_thinking);
    // A named tool: the prompt shows every tool (llama.cpp's prompt does not depend on the choice), the
    // grammar and the parser are those of a request that offers that tool alone.
    if (!named_json.empty())
      calls = impl_->apply(messages, named_json, choice, use.parallel, enable_thinking);
  } catch (const std::exception& e) {
    return invalid(std::string("chat template: ") + e.what());
  }
  const llama_chat::Rendered& g = named_json.empty() ? r : calls;
  RenderedChat out;
  out.text = std::move(r.prompt);
  out.parser = std::make_shared<const ChatAnswerParser>(g.parser);
  out.supports_thinking = r.supports_thinking;
  out.additional_stops = g.additional_stops;
  out.grammar = {g.grammar, g.grammar_lazy, {}, g.preserved_tokens, g.generation_prompt};
  for (const llama_chat::Trigger& t : g.triggers) {
    GrammarTrigger::Kind kind = GrammarTrigger::Kind::word;
    if (t.kind == llama_chat::Trigger::Kind::pattern) kind = GrammarTrigger::Kind::pattern;
    if (t.kind == llama_chat::Trigger::Kind::pattern_full) kind = GrammarTrigger::Kind::pattern_full;
    out.grammar.triggers.push_back({kind, t.value});
  }
  if (!r.parts.empty()) {
    for (const llama_chat::Part& p : r.parts) add_text(out.segments, p.text, p.input);
  } else {
    if (tok)
      if (auto st = check_request_text(*tok, turns, tools); !st) return st.error();
    // Markers come from message text only: split the whole prompt at them.
    std::string_view s = out.text;
    for (size_t m; (m = s.find(kImageMarker)) != std::string_view::npos;
         s.remove_prefix(m + kImageMarker.size())) {
      add_text(out.segments, s.substr(0, m), false);
      out.segments.push_back({std::string(kImageMarker), false, true});
    }
    add_text(out.segments, s, false);
  }
  return out;
}

protocol::Result<std::string> render_chat_text(std::string_view jinja, std::span<const ChatTurn> turns,
                                               std::string_view bos, std::string_view eos,
                                               std::span<const ChatTool> tools) {
  auto t = ChatTemplate::make(jinja, std::string(bos), std::string(eos));
  if (!t) return t.error();
  auto r = (*t)->render(turns, tools);
  if (!r) return r.error();
  return std::move(r->text);
}

protocol::Result<std::vector<TokenId>> encode_chat(const Tokenizer& tok, const RenderedChat& chat,
                                                   std::span<const std::vector<TokenId>> images) {
  const size_t markers = static_cast<size_t>(std::count_if(chat.segments.begin(), chat.segments.end(),
                                                           [](const ChatSegment& s) { return s.image; }));
  if (markers != images.size())
    return invalid(images.empty() ? "this model takes no images"
                                  : "chat: " + std::to_string(markers) + " image markers for " +
                                        std::to_string(images.size()) + " images");
  std::vector<TokenId> out;
  size_t image = 0;
  // Text between images is one tokenizer call (as llama.cpp tokenizes the chunks between media markers);
  // request text in it is a literal range.
  std::string run;
  std::vector<TextRange> literal;
  auto flush = [&]() -> protocol::Status {
    if (run.empty()) return {};
    auto ids = tok.encode_rendered(run, literal);
    if (!ids) return ids.error();
    out.insert(out.end(), ids->begin(), ids->end());
    run.clear();
    literal.clear();
    return {};
  };
  for (const ChatSegment& s : chat.segments) {
    if (s.image) {
      if (auto st = flush(); !st) return st.error();
      out.insert(out.end(), images[image].begin(), images[image].end());
      ++image;
      continue;
    }
    if (s.literal) literal.push_back({run.size(), run.size() + s.text.size()});
    run += s.text;
  }
  if (auto st = flush(); !st) return st.error();
  // llama-server tokenizes the prompt with the vocabulary's BOS in front, once.
  if (tok.add_bos() && tok.bos() && (out.empty() || out.front() != *tok.bos()))
    out.insert(out.begin(), *tok.bos());
  return out;
}

}  // namespace epd::model
