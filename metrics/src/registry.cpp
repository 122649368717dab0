#include "epd/metrics/registry.hpp"

#include <prometheus/text_serializer.h>

#include <sstream>

namespace epd::metrics {

Registry::Registry(Labels constant)
    : constant_(std::move(constant)), families_(std::make_shared<prometheus::Registry>()) {}

Family<Counter>& Registry::counter(const std::string& name, const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Labels(constant_).Register(*families_);
}

Family<Gauge>& Registry::gauge(const std::string& name, const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Labels(constant_).Register(*families_);
}

Family<Histogram>& Registry::histogram(const std::string& name, const std::string& help) {
  return prometheus::BuildHistogram().Name(name).Help(help).Labels(constant_).Register(*families_);
}

void Registry::on_scrape(std::function<void(Snapshot&)> collect) {
  std::lock_guard lock(mu_);
  collectors_.push_back(std::move(collect));
}

std::string Registry::render() const {
  auto families = families_->Collect();
  Snapshot snap(constant_);
  {
    std::lock_guard lock(mu_);
    for (const auto& c : collectors_) c(snap);
  }
  for (auto& f : snap.take()) families.push_back(std::move(f));
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

}  // namespace epd::metrics
