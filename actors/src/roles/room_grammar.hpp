#pragma once
// A room's grammar state where its tokens are drawn (prefill's first token, decode's loop): llama.cpp's
// vocabulary is loaded once per compute actor, on the first room with a grammar, and each room's state is
// rebuilt from the answer's tokens so far (a resumed room's end its prompt), so a retried or resumed room
// draws what the first would have (docs/model.md, "Grammars").
#include <memory>
#include <span>
#include <string>

#include "epd/model/grammar.hpp"

namespace epd::actors {

class RoomGrammars {
 public:
  explicit RoomGrammars(model::ModelConfig cfg) : cfg_(std::move(cfg)) {}
  // The state of `spec` after `answer`. invalid_request for a model without a GGUF vocabulary, a grammar
  // that does not parse, or an answer it refuses.
  protocol::Result<std::unique_ptr<model::Grammar>> state(const protocol::GrammarSpec& spec,
                                                          std::span<const uint32_t> answer);

 private:
  model::ModelConfig cfg_;
  std::shared_ptr<const model::GrammarVocab> vocab_;
};

}  // namespace epd::actors
