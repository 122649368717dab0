#include "special_split.hpp"

#include <algorithm>

namespace epd::model::detail {

void SpecialMatcher::add(std::string spelling, TokenId id, bool control, bool rstrip) {
  if (spelling.empty()) return;  // an empty spelling would match everywhere
  by_spelling_.emplace(spelling, id);
  Entry e{std::move(spelling), id, control, rstrip};
  auto at = std::upper_bound(entries_.begin(), entries_.end(), e, [](const Entry& a, const Entry& b) {
    return a.spelling.size() > b.spelling.size();
  });
  entries_.insert(at, std::move(e));
}

std::optional<TokenId> SpecialMatcher::find(std::string_view spelling) const {
  auto it = by_spelling_.find(std::string(spelling));
  if (it == by_spelling_.end()) return std::nullopt;
  return it->second;
}

namespace {

bool inside(std::span<const TextRange> literal, size_t begin, size_t end) {
  auto it = std::upper_bound(literal.begin(), literal.end(), begin,
                             [](size_t at, const TextRange& r) { return at < r.end; });
  return it != literal.end() && it->begin <= begin && end <= it->end;
}

}  // namespace

std::vector<Fragment> SpecialMatcher::split(std::string_view text, bool parse_special,
                                            std::span<const TextRange> literal) const {
  std::vector<Fragment> frags;
  if (!text.empty()) frags.push_back({text, std::nullopt});
  for (const Entry& e : entries_) {
    if (e.control && !parse_special) continue;
    std::vector<Fragment> next;
    next.reserve(frags.size());
    for (const Fragment& f : frags) {
      if (f.token) {
        next.push_back(f);
        continue;
      }
      std::string_view rest = f.text;
      for (size_t at, from = 0; (at = rest.find(e.spelling, from)) != std::string_view::npos;) {
        const size_t abs = static_cast<size_t>(rest.data() - text.data()) + at;
        if (e.control && inside(literal, abs, abs + e.spelling.size())) {
          from = at + 1;  // request text: the spelling stays text
          continue;
        }
        if (at > 0) next.push_back({rest.substr(0, at), std::nullopt});
        next.push_back({{}, e.id});
        rest.remove_prefix(at + e.spelling.size());
        if (e.rstrip)  // C isspace, as llama.cpp: ASCII whitespace only
          while (!rest.empty() &&
                 std::string_view(" \t\n\v\f\r").find(rest.front()) != std::string_view::npos)
            rest.remove_prefix(1);
        from = 0;
      }
      if (!rest.empty()) next.push_back({rest, std::nullopt});
    }
    frags = std::move(next);
  }
  return frags;
}

}  // namespace epd::model::detail

namespace epd::model {

protocol::Result<std::vector<TokenId>> Tokenizer::encode_rendered(std::string_view text,
                                                                  std::span<const TextRange> literal) const {
  std::vector<TokenId> out;
  size_t at = 0;
  auto add = [&](std::string_view piece, bool parse_special) -> protocol::Status {
    if (piece.empty()) return {};
    auto ids = encode(piece, parse_special);
    if (!ids) return ids.error();
    out.insert(out.end(), ids->begin(), ids->end());
    return {};
  };
  for (const TextRange& r : literal) {
    if (auto st = add(text.substr(at, r.begin - at), true); !st) return st.error();
    if (auto st = add(text.substr(r.begin, r.end - r.begin), false); !st) return st.error();
    at = r.end;
  }
  if (auto st = add(text.substr(at), true); !st) return st.error();
  return out;
}

}  // namespace epd::model
