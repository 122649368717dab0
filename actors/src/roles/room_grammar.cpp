#include "roles/room_grammar.hpp"

namespace epd::actors {

protocol::Result<std::unique_ptr<model::Grammar>> RoomGrammars::state(const std::string& gbnf,
                                                                      std::span<const uint32_t> answer) {
  if (!vocab_) {
    auto v = model::load_grammar_vocab(cfg_);
    if (!v) return v.error();
    vocab_ = std::move(*v);
  }
  return model::Grammar::rebuild(vocab_, gbnf, answer);
}

}  // namespace epd::actors
