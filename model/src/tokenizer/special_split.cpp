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

std::vector<Fragment> SpecialMatcher::split(std::string_view text, bool parse_special) const {
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
      for (size_t at; (at = rest.find(e.spelling)) != std::string_view::npos;) {
        if (at > 0) next.push_back({rest.substr(0, at), std::nullopt});
        next.push_back({{}, e.id});
        rest.remove_prefix(at + e.spelling.size());
        if (e.rstrip)  // C isspace, as llama.cpp: ASCII whitespace only
          while (!rest.empty() &&
                 std::string_view(" \t\n\v\f\r").find(rest.front()) != std::string_view::npos)
            rest.remove_prefix(1);
      }
      if (!rest.empty()) next.push_back({rest, std::nullopt});
    }
    frags = std::move(next);
  }
  return frags;
}

}  // namespace epd::model::detail
