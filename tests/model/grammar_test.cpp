// The grammar component (epd/model/grammar.hpp) on the committed demo model's GGUF and on a generated
// checkpoint: llama.cpp's token ids agree with epd's tokenizer, the mask keeps exactly the tokens that
// continue the grammar, end tokens come only when it is complete, a state rebuilt from the answer so far
// equals the incremental one, and bad grammars and schemas are refused with a reason.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "epd/model/grammar.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/prompt_codec.hpp"
#include "epd/model/sampling.hpp"
#include "llama_checkpoint.hpp"

using namespace epd;
using namespace epd::model;
namespace fs = std::filesystem;

namespace {

struct Vocab {
  ModelConfig cfg;
  std::shared_ptr<const PromptCodec> codec;
  std::shared_ptr<const GrammarVocab> vocab;
};

Vocab load_vocab(const std::string& gguf) {
  Vocab v;
  auto cfg = load_model_path(gguf);
  REQUIRE(cfg.ok());
  v.cfg = *cfg;
  auto codec = PromptCodec::for_model(v.cfg);
  REQUIRE(codec.ok());
  v.codec = *codec;
  auto vocab = load_grammar_vocab(v.cfg);
  if (!vocab) FAIL(vocab.error().to_string());
  v.vocab = *vocab;
  return v;
}

const Vocab& demo() {
  static const Vocab v = load_vocab(std::string(EPD_SOURCE_DIR) + "/tools/demo-model/out/lm.gguf");
  return v;
}

const Vocab& checkpoint() {
  static const Vocab v = [] {
    const fs::path dir = fs::temp_directory_path() / ("epd-grammar-test-" + std::to_string(::getpid()));
    testing::CheckpointSpec spec;
    spec.chat = true;
    auto p = testing::write_llama_checkpoint(spec, dir);
    REQUIRE(p.ok());
    return load_vocab(p->gguf);
  }();
  return v;
}

std::unique_ptr<Grammar> make(const Vocab& v, std::string_view gbnf) {
  auto g = Grammar::make(v.vocab, gbnf);
  if (!g) FAIL(g.error().to_string());
  return std::move(*g);
}

std::vector<TokenId> encode(const Vocab& v, const std::string& text) {
  auto t = v.codec->tokenizer().encode(text, false);
  REQUIRE(t.ok());
  return *t;
}

// The tokens apply() keeps out of all-zero logits.
std::vector<TokenId> allowed(Grammar& g, uint32_t vocab) {
  std::vector<float> logits(vocab, 0.0f);
  g.apply(logits);
  std::vector<TokenId> out;
  for (TokenId t = 0; t < vocab; ++t)
    if (logits[t] != -INFINITY) out.push_back(t);
  return out;
}

// A GBNF sequence for `s` (ASCII): each space may also be SentencePiece's "\u2581", which a vocabulary
// without the piece spells in byte tokens (llama.cpp's text of them is the character itself).
std::string literal(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == ' ') {
      out += "\" (\" \" | \"\u2581\") \"";
      continue;
    }
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

void check_tokens_agree(const Vocab& v, const std::vector<std::string>& sentences) {
  for (const auto& s : sentences) {
    INFO(s);
    const auto tokens = encode(v, s);
    // SentencePiece may put a space in front of the first word.
    auto g = make(v, "root ::= " + literal(" " + s) + " | " + literal(s));
    for (TokenId t : tokens) {
      INFO("token " << t);
      REQUIRE(g->accept(t).ok());
    }
    CHECK(g->complete());
  }
}

}  // namespace

TEST_CASE("grammar vocabulary of the demo model agrees with epd's tokenizer token by token") {
  check_tokens_agree(demo(),
                     {"A large green circle on the left, a small orange square in the centre.",
                      "The square is yellow.", "No, there is no triangle.", "yes", "{\"a\": [1, 2]}"});
}

TEST_CASE("grammar vocabulary of a generated checkpoint agrees with epd's tokenizer") {
  check_tokens_agree(checkpoint(), {"w300 w271 w350", "caf\xC3\xA9 w333", "{\"k\": true}", "no"});
}

TEST_CASE("grammar mask keeps the tokens that continue it and end tokens only when complete") {
  for (const Vocab* v : {&demo(), &checkpoint()}) {
    auto g = make(*v, R"(root ::= "yes" | "no")");
    const auto first = allowed(*g, v->cfg.vocab);
    REQUIRE_FALSE(first.empty());
    for (TokenId t : first) {
      const std::string text = v->codec->tokenizer().piece(t, false);
      INFO("token " << t << " '" << text << "'");
      CHECK((std::string("yes").starts_with(text) || std::string("no").starts_with(text)));
      CHECK_FALSE(v->codec->ends_generation(t));
    }
    CHECK_FALSE(g->complete());
    for (TokenId t : v->codec->stop_tokens()) {
      CHECK_FALSE(g->allows(t));
      CHECK_FALSE(g->accept(t).ok());  // refused, not llama.cpp's abort
    }
    // "yes" token by token, however the vocabulary splits it: the longest allowed piece each time.
    auto g2 = make(*v, R"(root ::= "yes" | "no")");
    auto piece = [&](TokenId t) { return v->codec->tokenizer().piece(t, false); };
    std::string said;
    while (!g2->complete()) {
      std::optional<TokenId> pick;
      for (TokenId t : allowed(*g2, v->cfg.vocab))
        if (std::string("yes").starts_with(said + piece(t)) &&
            (!pick || piece(t).size() > piece(*pick).size()))
          pick = t;
      REQUIRE(pick);
      said += piece(*pick);
      REQUIRE(g2->accept(*pick).ok());
    }
    CHECK(said == "yes");
    // Complete and nothing can follow: only end tokens are left, and every stop token the codec has that
    // llama.cpp counts as an end of generation.
    const auto last = allowed(*g2, v->cfg.vocab);
    REQUIRE_FALSE(last.empty());
    for (TokenId t : last) CHECK(v->codec->ends_generation(t));
    CHECK(g2->accept(last.front()).ok());
    // A token the grammar refuses is an error, and the state then refuses everything.
    auto g3 = make(*v, R"(root ::= "yes" | "no")");
    const auto z = encode(*v, "zzz");
    CHECK_FALSE(g3->accept(z.back()).ok());
  }
}

TEST_CASE("grammar rebuilt from the answer so far equals the incremental state") {
  const Vocab& v = demo();
  const auto answer = encode(v, "{\"shape\": \"circle\", \"sides\": [1, 2.5, -3], \"ok\": true}");
  auto incremental = make(v, json_object_grammar());
  for (size_t i = 0; i <= answer.size(); ++i) {
    INFO("after " << i << " tokens");
    auto rebuilt = Grammar::rebuild(v.vocab, json_object_grammar(), std::span(answer).first(i));
    REQUIRE(rebuilt.ok());
    CHECK(allowed(**rebuilt, v.cfg.vocab) == allowed(*incremental, v.cfg.vocab));
    CHECK((*rebuilt)->complete() == incremental->complete());
    if (i < answer.size()) REQUIRE(incremental->accept(answer[i]).ok());
  }
  CHECK(incremental->complete());
  // An answer the grammar refuses cannot be rebuilt.
  const auto bad = encode(v, "[1]");
  CHECK_FALSE(Grammar::rebuild(v.vocab, json_object_grammar(), bad).ok());
}

TEST_CASE("grammar refuses invalid grammars with a reason") {
  const Vocab& v = checkpoint();
  auto refused = [&](const std::string& gbnf, const std::string& why) {
    INFO(gbnf.substr(0, 80));
    auto g = Grammar::make(v.vocab, gbnf);
    REQUIRE_FALSE(g.ok());
    CHECK(g.error().code == protocol::ErrorCode::invalid_request);
    CHECK_THAT(g.error().detail, Catch::Contains(why));
    CHECK_FALSE(check_grammar(v.vocab, gbnf).ok());
  };
  refused("root ::= \"a", "invalid grammar: unexpected end of input");
  refused("root ::= missing", "invalid grammar: undefined rule 'missing'");
  refused("root ::= [a", "invalid grammar");
  refused("root = \"a\"", "invalid grammar: expecting ::= at");
  refused("other ::= \"a\"", "does not contain a 'root' symbol");
  refused("root ::= root \"a\" | \"a\"", "left recursion");
  refused("root ::= a\na ::= b \"x\"\nb ::= a \"y\" | \"z\"", "invalid grammar");
  refused("", "empty");
  refused("root ::= " + std::string(65, '(') + "\"a\"" + std::string(65, ')'), "deeper than 64");
  refused("root ::= \"" + std::string(kMaxGrammarBytes, 'a') + "\"", "limit");
  refused("root ::= \"a\"{100000}", "invalid grammar: number of repetitions exceeds sane defaults");
  // Parentheses in strings, classes and comments do not count as nesting.
  CHECK(Grammar::make(v.vocab, "root ::= \"" + std::string(100, '(') + "\" [(] # ((((\n").ok());
  CHECK(check_grammar(v.vocab, json_object_grammar()).ok());
}

TEST_CASE("grammar from JSON schemas and refusals of bad ones") {
  const Vocab& v = demo();
  auto g = json_schema_grammar(
      R"({"type":"object","properties":{"shape":{"enum":["circle","square"]},"n":{"type":"integer"}},)"
      R"("required":["shape","n"],"additionalProperties":false})");
  REQUIRE(g.ok());
  auto grammar = make(v, *g);
  const auto answer = encode(v, "{\"shape\": \"circle\", \"n\": 3}");
  auto rebuilt = Grammar::rebuild(v.vocab, *g, answer);
  if (!rebuilt) FAIL(rebuilt.error().to_string());
  CHECK((*rebuilt)->complete());
  CHECK_FALSE(Grammar::rebuild(v.vocab, *g, encode(v, "{\"shape\": \"oval\"")).ok());
  // A recursive schema is fine when the recursion is not left recursion.
  auto tree = json_schema_grammar(
      R"({"$defs":{"node":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}}}},)"
      R"("$ref":"#/$defs/node"})");
  REQUIRE(tree.ok());
  CHECK(check_grammar(v.vocab, *tree).ok());

  auto bad = [&](const std::string& schema) {
    INFO(schema.substr(0, 80));
    auto r = json_schema_grammar(schema);
    if (r.ok()) {
      auto st = check_grammar(v.vocab, *r);
      CHECK_FALSE(st.ok());
      if (!st.ok()) CHECK(st.error().code == protocol::ErrorCode::invalid_request);
    } else {
      CHECK(r.error().code == protocol::ErrorCode::invalid_request);
    }
  };
  bad("not json");
  bad("[1, 2]");
  bad(R"({"$ref":"#/$defs/missing"})");
  bad(R"({"$ref":"#"})");
  bad(R"({"type":"object","properties":{"a":{"$ref":"https://example.com/schema"}}})");
  bad(std::string(kMaxGrammarBytes + 1, ' '));
}

TEST_CASE("grammar greedy draws take the unmasked argmax only when allowed and equal the masked draw") {
  const Vocab& v = demo();
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  SamplingParams greedy;
  SamplingParams biased;
  biased.logit_bias = {{3, 5.0f}};
  biased.repetition_penalty = 1.3f;
  for (const SamplingParams* p : {&greedy, &biased}) {
    auto fast = make(v, json_object_grammar());
    auto full = make(v, json_object_grammar());
    std::vector<TokenId> history = {1, 2, 3};
    int fast_hits = 0;
    for (uint32_t i = 0; i < 60 && !full->complete(); ++i) {
      std::vector<float> logits(v.cfg.vocab);
      for (float& x : logits) x = normal(rng);
      // Half the steps: the model's choice is one the grammar allows, so the fast path is taken.
      std::optional<TokenId> boosted;
      if (i % 2 == 0) {
        boosted = allowed(*full, v.cfg.vocab).back();
        logits[*boosted] = 50.0f;
      }
      std::vector<float> masked = logits;
      full->apply(masked);
      const TokenId want = sample_token(masked, *p, i, TokenFilter::none, history);
      const TokenId got = sample_constrained(logits, *p, i, TokenFilter::none, history, fast.get());
      INFO("step " << i);
      REQUIRE(got == want);
      fast_hits += boosted && got == *boosted;
      REQUIRE(full->accept(want).ok());
      REQUIRE(fast->accept(got).ok());
      history.push_back(got);
    }
    CHECK(fast_hits > 0);
  }
}

// Counts the full masks, so a test sees which way a draw went.
class CountingConstraint final : public TokenConstraint {
 public:
  explicit CountingConstraint(TokenConstraint& inner) : inner_(inner) {}
  void apply(std::span<float> logits) override {
    ++masks;
    inner_.apply(logits);
  }
  bool allows(TokenId token) override { return inner_.allows(token); }
  protocol::Status accept(TokenId token) override { return inner_.accept(token); }
  int masks = 0;

 private:
  TokenConstraint& inner_;
};

TEST_CASE("grammar sampled top_k draws skip the full mask when enough top tokens are allowed and equal it") {
  // A vocabulary large enough for the shortcut (on a small one the mask is cheap and always taken):
  // llama.cpp's vocab-only Llama 2 file, 32,000 tokens.
  auto vocab = load_grammar_vocab_file(std::string(EPD_LLAMA_CPP_MODELS) + "/ggml-vocab-llama-spm.gguf");
  REQUIRE(vocab.ok());
  const uint32_t n = vocab_size(**vocab);
  auto grammar = [&](const std::string& gbnf) {
    auto g = Grammar::make(*vocab, gbnf);
    REQUIRE(g.ok());
    return std::move(*g);
  };
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  // Twenty letters: many tokens are allowed at every step, and the shortcut is taken. A JSON object: at its
  // start and end few are, and the draw masks.
  std::string letters = "root ::=";
  for (int w = 0; w < 20; ++w) letters += " [a-z]";
  for (const std::string& gbnf : {letters, json_object_grammar()})
    for (uint32_t top_k : {1u, 5u, 40u}) {
      SamplingParams p;
      p.temperature = 0.8f;
      p.top_k = top_k;
      p.top_p = 0.95f;
      p.seed = 7;
      p.frequency_penalty = 2.0f;
      auto fast = grammar(gbnf);
      auto full = grammar(gbnf);
      // A bias on every third token the grammar allows at first: the order the shortcut asks in must be
      // the draw's, after the bias and the penalties.
      const auto first_allowed = allowed(*full, n);
      for (size_t j = 0; j < first_allowed.size(); j += 3) p.logit_bias.push_back({first_allowed[j], 3.0f});
      CountingConstraint counted(*fast);
      std::vector<TokenId> history = {1, 2, 3};
      int steps = 0;
      for (uint32_t i = 0; i < 12 && !full->complete(); ++i, ++steps) {
        std::vector<float> logits(n);
        for (float& x : logits) x = normal(rng);
        // The model prefers what the grammar allows, as a trained one mostly does.
        for (TokenId t : allowed(*full, n)) logits[t] += 3.0f;
        std::vector<float> masked = logits;
        full->apply(masked);
        const TokenId want = sample_token(masked, p, i, TokenFilter::none, history);
        const TokenId got = sample_constrained(logits, p, i, TokenFilter::none, history, &counted);
        INFO(gbnf << ", top_k " << top_k << ", step " << i);
        REQUIRE(got == want);
        REQUIRE(full->accept(want).ok());
        REQUIRE(counted.accept(got).ok());
        history.push_back(got);
      }
      INFO("top_k " << top_k << ": " << counted.masks << " full masks in " << steps << " draws");
      if (gbnf == letters) CHECK(counted.masks < steps);  // the shortcut was taken
    }
}

// llama.cpp's chat layer makes tool-call grammars that start lazily (from a trigger on) or from the
// generation prompt (prefill): both as libllama's sampler does them, and rebuilt from an answer the same way.
TEST_CASE("a lazy grammar constrains from its trigger on, a prefilled one starts past the prefill") {
  const Vocab& v = demo();  // its byte-level vocabulary spells the texts below as they are
  const std::string call = R"(root ::= "<call>" ("yes" | "no") "</call>")";
  auto lazy_state = [&](const std::string& text) {
    protocol::GrammarSpec spec{call, true, {"<call>"}, {}, {}};
    return Grammar::rebuild(v.vocab, spec, encode(v, text));
  };
  // Before the trigger anything goes, and an end token may come; from it on, only the grammar.
  REQUIRE(lazy_state("free text, any words").ok());
  CHECK((*lazy_state("free text"))->complete());
  CHECK(lazy_state("text <call>yes</call>").ok());
  CHECK((*lazy_state("text <call>yes</call>"))->complete());
  CHECK_FALSE((*lazy_state("text <call>ye"))->complete());
  CHECK_FALSE(lazy_state("text <call>maybe").ok());
  // A pattern over the whole text so far (llama.cpp's PATTERN_FULL, anchored).
  protocol::GrammarSpec full{call, true, {"^<call>[\\s\\S]*$"}, {}, {}};
  CHECK(Grammar::rebuild(v.vocab, full, encode(v, "<call>no</call>")).ok());
  CHECK(Grammar::rebuild(v.vocab, full, encode(v, "later <callx")).ok());  // never triggered: free
  // The same grammar made eagerly refuses the free text.
  CHECK_FALSE(Grammar::rebuild(v.vocab, call, encode(v, "free text")).ok());

  // Prefill: the grammar spells the generation prompt, which the prompt already holds.
  const std::string answer = R"(root ::= "Answer: " ("yes" | "no"))";
  const protocol::GrammarSpec prefilled{answer, false, {}, {}, encode(v, "Answer: ")};
  auto g = Grammar::rebuild(v.vocab, prefilled, encode(v, "yes"));
  REQUIRE(g.ok());
  CHECK((*g)->complete());
  CHECK_FALSE(Grammar::rebuild(v.vocab, answer, encode(v, "yes")).ok());  // without the prefill
  CHECK_FALSE(Grammar::rebuild(v.vocab, prefilled, encode(v, "Answer: yes")).ok());

  // Bounded before libllama sees them, each a clear refusal.
  const uint32_t n = vocab_size(*v.vocab);
  const std::vector<std::pair<protocol::GrammarSpec, std::string>> bad = {
      {{call, true, {}, {}, {}}, "needs a trigger"},
      {{call, false, {"<call>"}, {}, {}}, "for a lazy grammar"},
      {{call, true, {"(unclosed"}, {}, {}}, "is not a regular expression"},
      {{call, true, {}, {n}, {}}, "is not in the vocabulary"},
      {{answer, false, {}, {}, {n + 5}}, "is not in the vocabulary"},
      {{call, true, {"<call>"}, {}, encode(v, "x")}, "takes no prefill"},
      {{answer, false, {}, {}, encode(v, "Question")}, "refuses prefill token 0"},
      {{call, true, std::vector<std::string>(kMaxGrammarTriggers + 1, "x"), {}, {}}, "the limit is"},
  };
  for (const auto& [spec, why] : bad) {
    INFO(why);
    auto made = Grammar::make(v.vocab, spec);
    REQUIRE_FALSE(made.ok());
    CHECK(made.error().detail.find(why) != std::string::npos);
  }
}
