#pragma once
// One process's metrics (docs/metrics.md lists them): families that code updates as events happen
// (counters and histograms from prometheus-cpp, thread-safe) and collectors that sample figures kept
// elsewhere at scrape time. Every series carries the process's constant labels (instance_id, role).
// render() gives the Prometheus text exposition format; serving it is someone else's job (no I/O here).
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "epd/metrics/snapshot.hpp"

namespace epd::metrics {

using Counter = prometheus::Counter;
using Gauge = prometheus::Gauge;
using Histogram = prometheus::Histogram;
template <class T>
using Family = prometheus::Family<T>;

class Registry {
 public:
  explicit Registry(Labels constant = {});

  // The family `name`, registered on first use; asking again for the same name and help returns it.
  Family<Counter>& counter(const std::string& name, const std::string& help);
  Family<Gauge>& gauge(const std::string& name, const std::string& help);
  Family<Histogram>& histogram(const std::string& name, const std::string& help);

  // `collect` runs on every scrape (on the scraping thread); it must only read thread-safe figures.
  void on_scrape(std::function<void(Snapshot&)> collect);

  // Everything, in the Prometheus text format (version 0.0.4).
  std::string render() const;

  const Labels& constant_labels() const { return constant_; }

 private:
  Labels constant_;
  std::shared_ptr<prometheus::Registry> families_;
  mutable std::mutex mu_;
  std::vector<std::function<void(Snapshot&)>> collectors_;
};

using RegistryPtr = std::shared_ptr<Registry>;

}  // namespace epd::metrics
