// libllama's grammar sampler over a vocabulary-only llama_model (docs/model.md, "Grammars").
#include "epd/model/grammar.hpp"

#include <llama-grammar.h>
#include <llama.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <regex>
#include <string>
#include <vector>

namespace epd::model {

namespace {

using protocol::ErrorCode;

protocol::Error invalid(std::string what) {
  return protocol::make_error(ErrorCode::invalid_request, std::move(what));
}

// llama.cpp reports grammar errors through its log, not its return values: while a grammar is parsed the
// calling thread's messages are kept for the refusal; otherwise only warnings and errors reach stderr (as
// the vision encoder's log does, epd/model/src/vision).
thread_local std::string* t_capture = nullptr;

void grammar_log(ggml_log_level level, const char* text, void*) {
  if (t_capture) {
    if (level >= GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_CONT) t_capture->append(text);
    return;
  }
  if (level >= GGML_LOG_LEVEL_WARN) std::fputs(text, stderr);
}

void install_log() {
  static std::once_flag once;
  std::call_once(once, [] { llama_log_set(grammar_log, nullptr); });
}

// The first line of llama.cpp's complaint that says something (its parser prints the grammar after it).
std::string first_line(const std::string& log) {
  size_t pos = 0;
  while (pos < log.size()) {
    size_t end = log.find('\n', pos);
    if (end == std::string::npos) end = log.size();
    std::string line = log.substr(pos, end - pos);
    if (line.find_first_not_of(" \t") != std::string::npos)
      return line.size() > 300 ? line.substr(0, 300) : line;
    pos = end + 1;
  }
  return "the grammar does not parse";
}

// llama.cpp's parser recurses once per nesting level of parentheses: bounded before it runs. Quoted
// strings and character classes are skipped (their escapes included), so "(" inside them does not count.
protocol::Status check_shape(std::string_view g) {
  if (g.size() > kMaxGrammarBytes)
    return invalid("the grammar is " + std::to_string(g.size()) + " bytes; the limit is " +
                   std::to_string(kMaxGrammarBytes));
  if (g.find_first_not_of(" \t\r\n") == std::string_view::npos) return invalid("the grammar is empty");
  if (g.find('\0') != std::string_view::npos) return invalid("the grammar holds a NUL byte");
  size_t depth = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const char c = g[i];
    if (c == '"' || c == '[') {
      const char close = c == '"' ? '"' : ']';
      for (++i; i < g.size() && g[i] != close; ++i)
        if (g[i] == '\\') ++i;
    } else if (c == '#') {
      while (i < g.size() && g[i] != '\n') ++i;
    } else if (c == '(') {
      if (++depth > kMaxGrammarDepth)
        return invalid("the grammar nests parentheses deeper than " + std::to_string(kMaxGrammarDepth));
    } else if (c == ')' && depth > 0) {
      --depth;
    }
  }
  return {};
}

// The lazy start and the prefill, bounded before libllama sees them (its regex constructor throws on a bad
// pattern; a token past the vocabulary would index out of it).
protocol::Status check_start(const protocol::GrammarSpec& spec, uint32_t vocab) {
  const size_t triggers = spec.trigger_patterns.size() + spec.trigger_tokens.size();
  if (!spec.lazy && triggers > 0) return invalid("grammar triggers are for a lazy grammar");
  if (spec.lazy && triggers == 0) return invalid("a lazy grammar needs a trigger");
  if (spec.lazy && !spec.prefill.empty()) return invalid("a lazy grammar takes no prefill tokens");
  if (triggers > kMaxGrammarTriggers)
    return invalid("the grammar has " + std::to_string(triggers) + " triggers; the limit is " +
                   std::to_string(kMaxGrammarTriggers));
  if (spec.prefill.size() > kMaxGrammarPrefill)
    return invalid("the grammar has " + std::to_string(spec.prefill.size()) +
                   " prefill tokens; the limit is " + std::to_string(kMaxGrammarPrefill));
  for (const std::string& p : spec.trigger_patterns) {
    if (p.empty() || p.size() > kMaxTriggerPatternBytes)
      return invalid("a grammar trigger pattern must have 1 to " + std::to_string(kMaxTriggerPatternBytes) +
                     " bytes");
    try {
      std::regex check(p);
    } catch (const std::regex_error& e) {
      return invalid("grammar trigger pattern '" + p + "' is not a regular expression: " + e.what());
    }
  }
  for (uint32_t t : spec.trigger_tokens)
    if (t >= vocab)
      return invalid("grammar trigger token " + std::to_string(t) + " is not in the vocabulary");
  for (uint32_t t : spec.prefill)
    if (t >= vocab)
      return invalid("grammar prefill token " + std::to_string(t) + " is not in the vocabulary");
  return {};
}

// llama.cpp's own parser, run the way llama_grammar_parser::parse runs it but keeping the reason of a syntax
// error (parse() prints it, with the whole grammar, to stderr and returns false): the exported class of the
// same tag (its header is the bundle's, checked in cmake/deps.cmake).
std::string syntax_error(const llama_vocab* vocab, const std::string& gbnf) {
  auto skip_space = [](const char* pos) {
    while (*pos == ' ' || *pos == '\t' || *pos == '#' || *pos == '\r' || *pos == '\n') {
      if (*pos == '#')
        while (*pos && *pos != '\r' && *pos != '\n') ++pos;
      else
        ++pos;
    }
    return pos;
  };
  llama_grammar_parser parser(vocab);
  try {
    for (const char* pos = skip_space(gbnf.c_str()); *pos;) pos = parser.parse_rule(pos);
    for (const auto& [name, id] : parser.symbol_ids)
      if (id >= parser.rules.size() || parser.rules[id].empty()) return "undefined rule '" + name + "'";
  } catch (const std::exception& e) {
    std::string what = e.what();
    return what.size() > 120 ? what.substr(0, 120) + "..." : what;
  }
  return {};
}

struct ModelFree {
  void operator()(llama_model* m) const { llama_model_free(m); }
};

}  // namespace

class GrammarVocab {
 public:
  explicit GrammarVocab(llama_model* model) : model_(model), vocab_(llama_model_get_vocab(model)) {}
  const llama_vocab* get() const { return vocab_; }

 private:
  std::unique_ptr<llama_model, ModelFree> model_;
  const llama_vocab* vocab_;
};

protocol::Result<std::shared_ptr<const GrammarVocab>> load_grammar_vocab(const ModelConfig& cfg) {
  const std::string& path = cfg.checkpoint;
  if (path.empty()) return invalid("model " + cfg.name + " (the reference model) takes no grammar");
  if (path.size() < 5 || path.substr(path.size() - 5) != ".gguf")
    return invalid("model " + cfg.name + " takes no grammar: grammars need the checkpoint as a GGUF file");
  auto vocab = load_grammar_vocab_file(path);
  if (!vocab) return vocab.error();
  const uint32_t n = vocab_size(**vocab);
  if (n != cfg.vocab)
    return protocol::make_error(ErrorCode::config_error, "llama.cpp reads " + std::to_string(n) +
                                                             " tokens from " + path + ", epd " +
                                                             std::to_string(cfg.vocab));
  return vocab;
}

uint32_t vocab_size(const GrammarVocab& vocab) {
  return uint32_t(std::max(0, llama_vocab_n_tokens(vocab.get())));
}

protocol::Result<std::shared_ptr<const GrammarVocab>> load_grammar_vocab_file(const std::string& path) {
  install_log();
  llama_model_params params = llama_model_default_params();
  params.vocab_only = true;
  std::string log;
  t_capture = &log;
  llama_model* model = llama_model_load_from_file(path.c_str(), params);
  t_capture = nullptr;
  if (!model) return invalid("llama.cpp cannot read the vocabulary of " + path + ": " + first_line(log));
  return std::shared_ptr<const GrammarVocab>(std::make_shared<const GrammarVocab>(model));
}

struct Grammar::Impl {
  std::shared_ptr<const GrammarVocab> vocab;
  llama_sampler* sampler = nullptr;
  llama_token end = LLAMA_TOKEN_NULL;  // an end-of-generation token, to ask whether one may come
  bool broken = false;                 // an accept failed: every token is forbidden

  ~Impl() {
    if (sampler) llama_sampler_free(sampler);
  }

  // Whether the grammar keeps `token` (one cell through the sampler).
  bool keeps(llama_token token) {
    if (broken) return false;
    llama_token_data cell{token, 0.0f, 0.0f};
    llama_token_data_array one{&cell, 1, -1, false};
    try {
      llama_sampler_apply(sampler, &one);
    } catch (...) {
      return false;
    }
    return std::isfinite(cell.logit);
  }
};

Grammar::Grammar(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Grammar::~Grammar() = default;

protocol::Result<std::unique_ptr<Grammar>> Grammar::make(std::shared_ptr<const GrammarVocab> vocab,
                                                         const protocol::GrammarSpec& spec) {
  if (!vocab) return invalid("no vocabulary to run a grammar over");
  if (auto st = check_shape(spec.gbnf); !st) return st.error();
  if (auto st = check_start(spec, vocab_size(*vocab)); !st) return st.error();
  install_log();
  const std::string& text = spec.gbnf;
  if (std::string why = syntax_error(vocab->get(), text); !why.empty())
    return invalid("invalid grammar: " + why);
  std::string log;
  t_capture = &log;
  llama_sampler* sampler = nullptr;
  try {
    if (spec.lazy) {
      std::vector<const char*> patterns;
      for (const std::string& p : spec.trigger_patterns) patterns.push_back(p.c_str());
      const std::vector<llama_token> tokens(spec.trigger_tokens.begin(), spec.trigger_tokens.end());
      sampler = llama_sampler_init_grammar_lazy_patterns(vocab->get(), text.c_str(), "root", patterns.data(),
                                                         patterns.size(), tokens.data(), tokens.size());
    } else {
      sampler = llama_sampler_init_grammar(vocab->get(), text.c_str(), "root");
    }
  } catch (const std::exception& e) {
    log += e.what();
  } catch (...) {
    log += "the grammar does not parse";
  }
  t_capture = nullptr;
  if (!sampler) return invalid("invalid grammar: " + first_line(log));
  auto impl = std::make_unique<Impl>();
  impl->vocab = std::move(vocab);
  impl->sampler = sampler;
  const llama_vocab* v = impl->vocab->get();
  for (llama_token t : {llama_vocab_eos(v), llama_vocab_eot(v)})
    if (t != LLAMA_TOKEN_NULL && impl->end == LLAMA_TOKEN_NULL) impl->end = t;
  // The generation prompt the template already wrote (llama.cpp's common_sampler_init feeds it the same
  // way, past the checks of accept(): it is no answer).
  for (size_t i = 0; i < spec.prefill.size(); ++i) {
    try {
      llama_sampler_accept(impl->sampler, llama_token(spec.prefill[i]));
    } catch (const std::exception& e) {
      return invalid("the grammar refuses prefill token " + std::to_string(i) + ": " + e.what());
    }
  }
  return std::unique_ptr<Grammar>(new Grammar(std::move(impl)));
}

protocol::Result<std::unique_ptr<Grammar>> Grammar::rebuild(std::shared_ptr<const GrammarVocab> vocab,
                                                            const protocol::GrammarSpec& spec,
                                                            std::span<const TokenId> answer) {
  auto g = make(std::move(vocab), spec);
  if (!g) return g.error();
  for (size_t i = 0; i < answer.size(); ++i)
    if (auto st = (*g)->accept(answer[i]); !st)
      return invalid("answer token " + std::to_string(i) + ": " + st.error().detail);
  return g;
}

void Grammar::apply(std::span<float> logits) {
  Impl& m = *impl_;
  if (m.broken) {
    for (float& x : logits) x = -INFINITY;
    return;
  }
  // One array per thread, not per room: a room's state stays small (12 bytes a token would be 1.5 MB a room
  // on a 128k vocabulary).
  thread_local std::vector<llama_token_data> cells;
  cells.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) cells[i] = {llama_token(i), logits[i], 0.0f};
  llama_token_data_array all{cells.data(), cells.size(), -1, false};
  try {
    llama_sampler_apply(m.sampler, &all);
  } catch (...) {
    m.broken = true;
    for (float& x : logits) x = -INFINITY;
    return;
  }
  // The sampler only lowers logits to -infinity, in place (the array is not reordered: sorted stays false).
  for (size_t i = 0; i < logits.size(); ++i)
    if (cells[i].logit == -INFINITY) logits[i] = -INFINITY;
}

bool Grammar::allows(TokenId token) {
  if (token >= uint32_t(llama_vocab_n_tokens(impl_->vocab->get()))) return false;
  return impl_->keeps(llama_token(token));
}

bool Grammar::complete() {
  return impl_->end != LLAMA_TOKEN_NULL && impl_->keeps(impl_->end);
}

protocol::Status Grammar::accept(TokenId token) {
  Impl& m = *impl_;
  const llama_vocab* v = m.vocab->get();
  if (m.broken) return invalid("the grammar failed on an earlier token");
  if (!allows(token)) return invalid("token " + std::to_string(token) + " does not continue the grammar");
  // libllama aborts the process on an end token the grammar does not allow: checked above, and an allowed
  // one changes nothing, so it is not passed on.
  if (llama_vocab_is_eog(v, llama_token(token))) return {};
  try {
    llama_sampler_accept(m.sampler, llama_token(token));
  } catch (const std::exception& e) {
    m.broken = true;
    return invalid(std::string("the grammar rejects token ") + std::to_string(token) + ": " + e.what());
  }
  return {};
}

protocol::Status check_grammar(std::shared_ptr<const GrammarVocab> vocab, const protocol::GrammarSpec& spec) {
  auto g = Grammar::make(std::move(vocab), spec);
  if (!g) return g.error();
  return {};
}

const std::string& json_object_grammar() {
  // llama.cpp's grammars/json.gbnf (the same tag), whose root is an object.
  static const std::string g = R"(root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
)";
  return g;
}

}  // namespace epd::model
