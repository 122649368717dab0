#include "epd/actors/load_gauge.hpp"

#include <variant>
#include <vector>

namespace epd::actors {
namespace {

// Both forms list their figures with the same fields(), in the same order: the n-th figure the gauge visits
// is the n-th of the report. So the copy is two walks, and a new figure (of a type listed in Target) needs
// no line here.
using Target = std::variant<bool*, uint32_t*, uint64_t*, std::optional<protocol::StagingStats>*>;

struct CollectTargets {
  std::vector<Target> targets;
  template <class T>
  void opt(std::string_view, T& value) {
    targets.emplace_back(&value);
  }
};

struct CopyFromGauge {
  const std::vector<Target>& targets;
  size_t next = 0;

  template <class T>
  void opt(std::string_view, std::atomic<T>& figure) {
    *std::get<T*>(targets[next++]) = figure.load();
  }
  void opt(std::string_view, StagingGauge& staging) {
    auto* out = std::get<std::optional<protocol::StagingStats>*>(targets[next++]);
    if (staging.active.load()) *out = staging.take_snapshot();
  }
};

}  // namespace

protocol::LoadReport LoadGauge::snapshot() {
  protocol::LoadReport report;
  CollectTargets collect;
  protocol::LoadReport::fields(report, collect);
  CopyFromGauge copy{collect.targets};
  fields(*this, copy);
  return report;
}

}  // namespace epd::actors
