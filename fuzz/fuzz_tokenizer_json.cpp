// The tokenizer.json loader (model/src/tokenizer/tokenizer_json.cpp with the BPE it builds): every
// Hugging Face directory an operator points epd at goes through it. The first byte picks whether a
// tokenizer_config.json follows (split at the first NUL). Invariants: a refusal is config_error with a
// message; an accepted tokenizer has 1..kMaxVocabSize tokens, encodes fixed probes to ids inside the
// vocabulary (or refuses with invalid_request naming a missing byte), and its bos/eos lie inside it.
#include "epd/model/tokenizer_load.hpp"
#include "fuzz_check.hpp"

using namespace epd::model;
using epd::protocol::ErrorCode;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  epd::fuzz::FuzzInput in(data, size);
  const bool with_config = in.take<uint8_t>() & 1;
  std::string_view json = in.rest_text(), config;
  if (with_config) {
    const size_t nul = json.find('\0');
    if (nul != std::string_view::npos) {
      config = json.substr(nul + 1);
      json = json.substr(0, nul);
    }
  }
  auto tok = load_tokenizer_json(json, config);
  if (!tok) {
    FUZZ_CHECK(tok.error().code == ErrorCode::config_error);
    FUZZ_CHECK(!tok.error().detail.empty());
    return 0;
  }
  const Tokenizer& t = **tok;
  FUZZ_CHECK(t.vocab_size() >= 1 && t.vocab_size() <= kMaxVocabSize);
  if (t.bos()) FUZZ_CHECK(*t.bos() < t.vocab_size());
  if (t.eos()) FUZZ_CHECK(*t.eos() < t.vocab_size());
  for (std::string_view probe :
       {"hello world", "  caf\xC3\xA9 \xE6\x9D\xB1\xE4\xBA\xAC 42\n", "<|im_start|>x"}) {
    for (bool special : {false, true}) {
      auto ids = t.encode(probe, special);
      if (!ids) {
        FUZZ_CHECK(ids.error().code == ErrorCode::invalid_request);
        continue;
      }
      for (TokenId id : *ids) FUZZ_CHECK(id < t.vocab_size());
      (void)decode(t, *ids, special);
    }
  }
  return 0;
}
