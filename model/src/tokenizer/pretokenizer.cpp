#define PCRE2_CODE_UNIT_WIDTH 8
#include "pretokenizer.hpp"

#include <pcre2.h>

namespace epd::model::detail {
namespace {

constexpr std::string_view kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr std::string_view kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

constexpr uint32_t kMatchLimit = 1'000'000;  // backtracking steps for one match

protocol::Error bad(std::string detail) {
  return protocol::make_error(protocol::ErrorCode::config_error, "pre-tokenizer: " + std::move(detail));
}

}  // namespace

struct Pretokenizer::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

protocol::Result<Pretokenizer> Pretokenizer::compile(const std::vector<std::string>& patterns) {
  if (patterns.empty()) return bad("no pattern");
  Pretokenizer p;
  for (const std::string& pat : patterns) {
    if (pat.size() > 64 * 1024) return bad("pattern longer than 64 KiB");
    int err = 0;
    PCRE2_SIZE at = 0;
    auto c = std::make_shared<Code>();
    c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(), PCRE2_UTF | PCRE2_UCP, &err,
                            &at, nullptr);
    if (!c->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      return bad("pattern does not compile at offset " + std::to_string(at) + ": " +
                 reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);  // without JIT (unsupported CPU) matching still works
    p.codes_.push_back(std::move(c));
  }
  return p;
}

protocol::Result<std::vector<std::string_view>> Pretokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (!text.empty()) pieces.push_back(text);
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(nullptr, &pcre2_match_data_free);
  // A hostile tokenizer.json may bring a backtracking-heavy regex: bounded work per match, then an error.
  std::unique_ptr<pcre2_match_context, decltype(&pcre2_match_context_free)> ctx(
      pcre2_match_context_create(nullptr), &pcre2_match_context_free);
  if (!ctx) return protocol::make_error(protocol::ErrorCode::internal, "pre-tokenizer: out of memory");
  pcre2_set_match_limit(ctx.get(), kMatchLimit);
  pcre2_set_depth_limit(ctx.get(), kMatchLimit);
  for (const auto& code : codes_) {
    md.reset(pcre2_match_data_create_from_pattern(code->code, nullptr));
    if (!md) return protocol::make_error(protocol::ErrorCode::internal, "pre-tokenizer: out of memory");
    std::vector<std::string_view> next;
    for (std::string_view piece : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t pos = 0, gap = 0;
      while (pos < piece.size()) {
        // The text was validated (sanitize_utf8), so PCRE2 need not check it again on every call.
        int rc = pcre2_match(code->code, subject, piece.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), ctx.get());
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
          rc = pcre2_match(code->code, subject, piece.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                           md.get(), ctx.get());
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          PCRE2_UCHAR msg[256];
          pcre2_get_error_message(rc, msg, sizeof msg);
          return protocol::make_error(protocol::ErrorCode::invalid_request,
                                      std::string("pre-tokenizer: ") + reinterpret_cast<const char*>(msg));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        const size_t s = ov[0], e = ov[1];
        if (s > gap) next.push_back(piece.substr(gap, s - gap));
        if (e > s) {
          next.push_back(piece.substr(s, e - s));
          gap = e;
          pos = e;
        } else {  // an empty match: step over one character, which stays in the gap
          pos = s + 1;
          while (pos < piece.size() && (static_cast<unsigned char>(piece[pos]) & 0xC0) == 0x80) ++pos;
        }
      }
      if (gap < piece.size()) next.push_back(piece.substr(gap));
    }
    pieces = std::move(next);
  }
  return pieces;
}

protocol::Result<std::vector<std::string>> patterns_for_pre(std::string_view pre) {
  if (pre == "gpt-2" || pre == "mpt" || pre == "olmo" || pre == "jais")
    return std::vector<std::string>{std::string(kGpt2)};
  if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "dbrx" || pre == "smaug-bpe")
    return std::vector<std::string>{std::string(kLlama3)};
  if (pre == "smollm" || pre == "starcoder" || pre == "refact" || pre == "command-r")
    return std::vector<std::string>{R"(\p{N})", std::string(kGpt2)};
  if (pre == "qwen2" || pre == "stablelm2") return std::vector<std::string>{std::string(kQwen2)};
  if (pre == "default" || pre.empty())
    return std::vector<std::string>{R"([\p{P}\$\+<=>\^~\|]+)", std::string(kGpt2), R"(\p{N}+)",
                                    "[0-9][0-9][0-9]"};
  return bad("tokenizer.ggml.pre \"" + std::string(pre) +
             "\" is not supported (gpt-2, llama-bpe, smollm, qwen2, default)");
}

bool pre_ignores_merges(std::string_view pre) {
  return pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe";
}

}  // namespace epd::model::detail
