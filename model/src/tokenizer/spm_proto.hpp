#pragma once
// A GGUF "llama" vocabulary as a SentencePiece ModelProto, so libsentencepiece tokenizes it. Written with
// the protobuf wire format directly (Debian ships no sentencepiece_model.pb.h); the fields used are those of
// sentencepiece_model.proto: pieces (piece, score, type), trainer_spec (model_type BPE, vocab_size,
// byte_fallback, unk/bos/eos/pad ids) and normalizer_spec (identity, add_dummy_prefix, no whitespace
// folding). BPE with these settings is the merge-by-score algorithm llama.cpp runs on such a vocabulary.
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "epd/model/tokenizer_load.hpp"

namespace epd::model::detail {

protocol::Result<std::string> spm_proto_from_vocab(const VocabMetadata& vocab);
// The ids of a ModelProto's USER_DEFINED pieces (libsentencepiece does not expose the type): llama.cpp
// splits them out of the text like control tokens, so epd does too. Malformed bytes give what was read.
std::vector<uint32_t> spm_user_defined_ids(std::string_view model_proto);
// rstrip: special tokens that drop the whitespace after them (SpecialMatcher).
protocol::Result<std::unique_ptr<Tokenizer>> make_sentencepiece(std::string_view proto,
                                                                std::optional<bool> add_bos,
                                                                const std::vector<TokenId>& rstrip = {});

}  // namespace epd::model::detail
