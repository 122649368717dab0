#pragma once
// Samples taken when /metrics is scraped, for figures that already live somewhere else (a role's LoadGauge
// atomics, the registry's member list): reading them at scrape time keeps one source of truth and costs
// nothing between scrapes.
#include <prometheus/metric_family.h>

#include <map>
#include <string>
#include <vector>

namespace epd::metrics {

using Labels = std::map<std::string, std::string>;

class Snapshot {
 public:
  explicit Snapshot(Labels constant) : constant_(std::move(constant)) {}

  // Adds one sample to the family `name` (created on first use with `help`); `labels` join the constant
  // labels. Counters must be monotonic and named ..._total.
  void gauge(const std::string& name, const std::string& help, double value, const Labels& labels = {});
  void counter(const std::string& name, const std::string& help, double value, const Labels& labels = {});

  std::vector<prometheus::MetricFamily> take() { return std::move(families_); }

 private:
  prometheus::ClientMetric& add(const std::string& name, const std::string& help, prometheus::MetricType type,
                                const Labels& labels);

  Labels constant_;
  std::vector<prometheus::MetricFamily> families_;
};

}  // namespace epd::metrics
