#include "roles/room_grammar.hpp"

namespace epd::actors {

protocol::Result<std::unique_ptr<model::Grammar>> RoomGrammars::state(const protocol::GrammarSpec& spec,
                                                                      std::span<const uint32_t> answer) {
  if (!vocab_) {
    auto v = model::load_grammar_vocab(cfg_);
    if (!v) return v.error();
    vocab_ = std::move(*v);
  }
  return model::Grammar::rebuild(vocab_, spec, answer);
}

}  // namespace epd::actors
