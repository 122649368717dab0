#include "epd/metrics/snapshot.hpp"

#include <stdexcept>

namespace epd::metrics {

prometheus::ClientMetric& Snapshot::add(const std::string& name, const std::string& help,
                                        prometheus::MetricType type, const Labels& labels) {
  prometheus::MetricFamily* family = nullptr;
  for (auto& f : families_)
    if (f.name == name) family = &f;
  if (!family) {
    families_.push_back(prometheus::MetricFamily{name, help, type, {}});
    family = &families_.back();
  } else if (family->type != type) {
    throw std::logic_error("metric " + name + " sampled with two types");
  }
  prometheus::ClientMetric m;
  Labels all = constant_;
  for (const auto& [k, v] : labels) all[k] = v;
  for (const auto& [k, v] : all) m.label.push_back({k, v});
  family->metric.push_back(std::move(m));
  return family->metric.back();
}

void Snapshot::gauge(const std::string& name, const std::string& help, double value, const Labels& labels) {
  add(name, help, prometheus::MetricType::Gauge, labels).gauge.value = value;
}

void Snapshot::counter(const std::string& name, const std::string& help, double value, const Labels& labels) {
  add(name, help, prometheus::MetricType::Counter, labels).counter.value = value;
}

}  // namespace epd::metrics
