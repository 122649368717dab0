#include "spm_proto.hpp"

#include <bit>
#include <cstring>

namespace epd::model::detail {
namespace {

class ProtoWriter {
 public:
  void varint(uint32_t field, uint64_t v) {
    tag(field, 0);
    raw_varint(v);
  }
  void sint32_as_varint(uint32_t field, int32_t v) {  // proto2 int32: negatives sign-extend to 64 bits
    varint(field, static_cast<uint64_t>(static_cast<int64_t>(v)));
  }
  void fixed32(uint32_t field, float f) {
    tag(field, 5);
    const uint32_t bits = std::bit_cast<uint32_t>(f);
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
  }
  void bytes(uint32_t field, std::string_view b) {
    tag(field, 2);
    raw_varint(b.size());
    out_.append(b);
  }
  std::string take() { return std::move(out_); }

 private:
  void tag(uint32_t field, uint32_t wire) { raw_varint(uint64_t{field} << 3 | wire); }
  void raw_varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>((v & 0x7F) | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  std::string out_;
};

protocol::Error bad(std::string detail) {
  return protocol::make_error(protocol::ErrorCode::config_error,
                              "gguf llama vocabulary: " + std::move(detail));
}

}  // namespace

protocol::Result<std::string> spm_proto_from_vocab(const VocabMetadata& v) {
  const size_t n = v.tokens.size();
  if (n == 0 || n > kMaxVocabSize) return bad(std::to_string(n) + " tokens");
  if (!v.scores.empty() && v.scores.size() != n) return bad("scores and tokens differ in count");
  if (!v.token_types.empty() && v.token_types.size() != n)
    return bad("token types and tokens differ in count");
  // SentencePiece takes exactly one UNKNOWN piece: the file's unknown_token_id, else its first unknown-typed
  // token. Other unknown-typed tokens (Phi-3's [PAD...] fillers) become control pieces: like llama.cpp's
  // unknown tokens they match only as parsed specials and never come out of a merge. The unknown_token_id's
  // piece is the unknown one whatever its type (Phi-3 types its <unk> control).
  std::optional<uint32_t> unk = v.unk;
  for (size_t i = 0; i < n && !unk && !v.token_types.empty(); ++i)
    if (v.token_types[i] == 2) unk = static_cast<uint32_t>(i);
  if (!unk) return bad("no unknown token (SentencePiece needs one)");
  auto id_in_range = [&](std::optional<uint32_t> id) { return !id || *id < n; };
  if (!id_in_range(unk) || !id_in_range(v.bos) || !id_in_range(v.eos))
    return bad("a special id is out of range");
  ProtoWriter model;
  bool has_bytes = false;
  for (size_t i = 0; i < n; ++i) {
    int32_t type = v.token_types.empty() ? 1 : v.token_types[i];
    if (type < 1 || type > 6) return bad("token " + std::to_string(i) + " has type " + std::to_string(type));
    if (v.tokens[i].empty()) return bad("token " + std::to_string(i) + " is empty");
    if (i == *unk)
      type = 2;
    else if (type == 2)
      type = 3;
    has_bytes = has_bytes || type == 6;
    ProtoWriter piece;
    piece.bytes(1, v.tokens[i]);
    piece.fixed32(2, v.scores.empty() ? 0.0f : v.scores[i]);
    piece.varint(3, static_cast<uint64_t>(type));
    model.bytes(1, piece.take());
  }
  ProtoWriter trainer;
  trainer.varint(3, 2);                   // model_type = BPE
  trainer.varint(4, n);                   // vocab_size
  trainer.varint(35, has_bytes ? 1 : 0);  // byte_fallback
  trainer.sint32_as_varint(40, static_cast<int32_t>(*unk));
  trainer.sint32_as_varint(41, v.bos ? static_cast<int32_t>(*v.bos) : -1);
  trainer.sint32_as_varint(42, v.eos ? static_cast<int32_t>(*v.eos) : -1);
  trainer.sint32_as_varint(43, -1);  // pad_id
  // libsentencepiece finds BOS and EOS by these spellings (defaults <unk> <s> </s>; Gemma's are <bos> <eos>).
  trainer.bytes(45, v.tokens[*unk]);               // unk_piece
  if (v.bos) trainer.bytes(46, v.tokens[*v.bos]);  // bos_piece
  if (v.eos) trainer.bytes(47, v.tokens[*v.eos]);  // eos_piece
  model.bytes(2, trainer.take());
  ProtoWriter norm;
  norm.bytes(1, "identity");
  norm.varint(3, v.add_space_prefix.value_or(true) ? 1 : 0);  // add_dummy_prefix
  norm.varint(4, 0);                                          // remove_extra_whitespaces
  norm.varint(5, 1);                                          // escape_whitespaces
  model.bytes(3, norm.take());
  return model.take();
}

namespace {

// A bounds-checked walk over protobuf wire format: just enough to read pieces' types.
class ProtoReader {
 public:
  explicit ProtoReader(std::string_view b) : b_(b) {}
  bool done() const { return pos_ >= b_.size() || bad_; }
  bool next(uint32_t& field, uint32_t& wire) {
    uint64_t tag;
    if (!varint(tag)) return false;
    field = static_cast<uint32_t>(tag >> 3);
    wire = static_cast<uint32_t>(tag & 7);
    return true;
  }
  bool varint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= b_.size()) return fail();
      const auto c = static_cast<unsigned char>(b_[pos_++]);
      v |= uint64_t{c & 0x7Fu} << shift;
      if (!(c & 0x80)) return true;
    }
    return fail();
  }
  bool bytes(std::string_view& out) {
    uint64_t n;
    if (!varint(n) || n > b_.size() - pos_) return fail();
    out = b_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool skip(uint32_t wire) {
    uint64_t v;
    std::string_view s;
    switch (wire) {
      case 0:
        return varint(v);
      case 1:
        return advance(8);
      case 2:
        return bytes(s);
      case 5:
        return advance(4);
      default:
        return fail();
    }
  }

 private:
  bool advance(size_t n) {
    if (n > b_.size() - pos_) return fail();
    pos_ += n;
    return true;
  }
  bool fail() {
    bad_ = true;
    return false;
  }
  std::string_view b_;
  size_t pos_ = 0;
  bool bad_ = false;
};

}  // namespace

std::vector<uint32_t> spm_user_defined_ids(std::string_view model_proto) {
  std::vector<uint32_t> ids;
  ProtoReader top(model_proto);
  uint32_t index = 0, field, wire;
  while (!top.done() && top.next(field, wire)) {
    if (field != 1 || wire != 2) {
      if (!top.skip(wire)) break;
      continue;
    }
    std::string_view piece;
    if (!top.bytes(piece)) break;
    ProtoReader p(piece);
    uint64_t type = 1;  // NORMAL by default
    while (!p.done() && p.next(field, wire)) {
      if (field == 3 && wire == 0) {
        if (!p.varint(type)) break;
      } else if (!p.skip(wire)) {
        break;
      }
    }
    if (type == 4) ids.push_back(index);
    ++index;
  }
  return ids;
}

}  // namespace epd::model::detail
