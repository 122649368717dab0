#pragma once
// Constrained decoding (docs/model.md, "Grammars"): a GBNF grammar in llama.cpp's dialect, run by libllama's
// grammar sampler over the model's vocabulary as llama.cpp reads it from the GGUF (vocab_only: no weights).
// A Grammar is a TokenConstraint: the runner masks each position's logits with it before the unchanged
// draw, and the sequence's owner accepts each drawn token. Its state is a function of (grammar text, answer
// tokens so far): a retried or resumed room rebuilds it by accepting the answer's tokens again.
//
// End of generation: the model's end-of-generation tokens (llama.cpp's EOG set) are allowed exactly when the
// text so far is a complete sentence of the grammar, so a finished answer always parses.
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "epd/model/config.hpp"
#include "epd/model/token_constraint.hpp"
#include "epd/protocol/messages.hpp"
#include "epd/protocol/result.hpp"

namespace epd::model {

// The largest grammar text a request may carry (GBNF bytes, after a JSON schema's conversion), and the
// deepest nesting of parentheses in it: llama.cpp's parser recurses once per level.
inline constexpr size_t kMaxGrammarBytes = 64 * 1024;
inline constexpr size_t kMaxGrammarDepth = 64;
// Triggers and prefill tokens of one grammar (llama.cpp's chat layer makes a handful).
inline constexpr size_t kMaxGrammarTriggers = 64;
inline constexpr size_t kMaxTriggerPatternBytes = 1024;
inline constexpr size_t kMaxGrammarPrefill = 256;

// llama.cpp's view of a model's vocabulary, shared by every grammar of a process (read-only once loaded).
class GrammarVocab;

// The vocabulary of cfg's GGUF checkpoint, checked to have cfg.vocab tokens. invalid_request for a model
// whose vocabulary llama.cpp cannot read (the reference model, a Hugging Face directory): grammars need a
// GGUF file.
protocol::Result<std::shared_ptr<const GrammarVocab>> load_grammar_vocab(const ModelConfig& cfg);
// Any GGUF's vocabulary, unchecked (benchmarks: llama.cpp's vocab-only files), and its size.
protocol::Result<std::shared_ptr<const GrammarVocab>> load_grammar_vocab_file(const std::string& gguf);
uint32_t vocab_size(const GrammarVocab& vocab);

class Grammar final : public TokenConstraint {
 public:
  ~Grammar() override;
  Grammar(const Grammar&) = delete;
  Grammar& operator=(const Grammar&) = delete;

  // The grammar's start state (rule "root"; a lazy one awaiting its trigger, one with prefill tokens past
  // them). invalid_request naming the cause for text over kMaxGrammarBytes, nesting deeper than
  // kMaxGrammarDepth, a syntax error, an undefined rule, a missing root or left recursion, a lazy grammar
  // without triggers or with a pattern that is not a regular expression, more than kMaxGrammarTriggers
  // triggers, prefill tokens the grammar refuses.
  static protocol::Result<std::unique_ptr<Grammar>> make(std::shared_ptr<const GrammarVocab> vocab,
                                                         const protocol::GrammarSpec& spec);
  static protocol::Result<std::unique_ptr<Grammar>> make(std::shared_ptr<const GrammarVocab> vocab,
                                                         std::string_view gbnf) {
    return make(std::move(vocab), protocol::GrammarSpec{std::string(gbnf)});
  }
  // make(), then accept() each of `answer` (the answer's tokens so far, e.g. the end of a resumed room's
  // prompt): the state a sequence that drew them has.
  static protocol::Result<std::unique_ptr<Grammar>> rebuild(std::shared_ptr<const GrammarVocab> vocab,
                                                            const protocol::GrammarSpec& spec,
                                                            std::span<const TokenId> answer);
  static protocol::Result<std::unique_ptr<Grammar>> rebuild(std::shared_ptr<const GrammarVocab> vocab,
                                                            std::string_view gbnf,
                                                            std::span<const TokenId> answer) {
    return rebuild(std::move(vocab), protocol::GrammarSpec{std::string(gbnf)}, answer);
  }

  // -infinity to every token whose text cannot continue the grammar, to the end-of-generation tokens
  // unless the text so far is complete, and to tokens with no text (control tokens).
  void apply(std::span<float> logits) override;
  // An end-of-generation token is accepted (and changes nothing) when the grammar is complete.
  protocol::Status accept(TokenId token) override;
  bool allows(TokenId token) override;
  // The text so far is a complete sentence: an end-of-generation token may come.
  bool complete();

 private:
  struct Impl;
  explicit Grammar(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Parses `spec` as make() does, without keeping the state: what the router checks before it makes a room.
protocol::Status check_grammar(std::shared_ptr<const GrammarVocab> vocab, const protocol::GrammarSpec& spec);
inline protocol::Status check_grammar(std::shared_ptr<const GrammarVocab> vocab, std::string_view gbnf) {
  return check_grammar(std::move(vocab), protocol::GrammarSpec{std::string(gbnf)});
}

// Any JSON object (OpenAI's response_format {"type": "json_object"}): llama.cpp's json.gbnf with the root
// an object.
const std::string& json_object_grammar();

// A JSON schema (its JSON text) as GBNF, by llama.cpp's json_schema_to_grammar: invalid_request for text
// that is not JSON, a schema the converter refuses (unsupported keywords, unresolvable or recursive-only
// $ref, ...) or a grammar over kMaxGrammarBytes. The schema must come from a parser with a depth limit.
protocol::Result<std::string> json_schema_grammar(std::string_view schema_json);

}  // namespace epd::model
