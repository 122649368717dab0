#include "ring_sampler.hpp"

#include <httplib.h>

#include <nlohmann/json.hpp>

namespace epd::bench {

RingSampler::RingSampler(std::string host, int port, std::chrono::milliseconds period)
    : host_(std::move(host)), port_(port), period_(period) {
  thread_ = std::thread([this] { loop(); });
}

RingSampler::~RingSampler() {
  stop();
}

void RingSampler::stop() {
  done_ = true;
  if (thread_.joinable()) thread_.join();
}

void RingSampler::loop() {
  using clock = std::chrono::steady_clock;
  httplib::Client c(host_, port_);
  const auto t0 = clock::now();
  while (!done_) {
    if (auto r = c.Get("/v1/instances"); r && r->status == 200) {
      const auto j = nlohmann::json::parse(r->body, nullptr, false);
      RingSample s;
      s.t_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
      if (j.is_array())
        for (const auto& e : j)
          if (e.is_object() && e.value("role", "") == "decode" && e.contains("staging")) {
            const auto& st = e["staging"];
            s.used += st.value("ring_used", uint64_t{0});
            s.peak += st.value("ring_peak", uint64_t{0});
            s.ring += st.value("ring_bytes", uint64_t{0});
          }
      samples_.push_back(s);
    }
    std::this_thread::sleep_for(period_);
  }
}

}  // namespace epd::bench
