#pragma once
// The plots `--plot DIR` draws, one function per kind, each fed from its bench's own results. A function
// only builds the script and the data (no I/O); render_plot (plot.hpp) writes and renders them. `subtitle`
// is a second title line: the command or workload the figures come from.
#include <string>
#include <vector>

#include "plot.hpp"
#include "ring_sampler.hpp"
#include "serve_report.hpp"
#include "transfer_row.hpp"

namespace epd::bench {

// `epd-bench transfer`: bandwidth vs block size (log x), one panel per engine backend with a line per batch
// size, against the baselines measured next to it in the same run (memcpy for a same-host backend; raw TCP
// and ZeroMQ for one that crosses a network). transfer-bandwidth.png
Plot transfer_bandwidth_plot(const std::vector<TransferRow>& rows, const std::string& subtitle);

// `epd-bench serve`: CDFs of the client's TTFT next to the router's own TTFT, and of the inter-token
// latency, over the successful requests (log x). serve-latency-cdf.png
Plot serve_latency_plot(const std::vector<RequestRecord>& records, const std::string& subtitle);

// `epd-bench serve --compare llama-server`: both servers per concurrency level, side by side, with the ratio
// epd / llama-server over each pair: requests/s, output tokens/s, TTFT, ITL and E2E (p50 and p99) and the
// peak RSS of each server's processes. serve-compare.png
Plot serve_compare_plot(const std::vector<CompareLevel>& levels, const std::string& subtitle);

// `epd-bench e2e --staged-config`: the decode staging ring in use over time, in % of the ring (left axis)
// and MiB (right axis). staging-ring.png
Plot ring_occupancy_plot(const std::vector<RingSample>& samples, const std::string& subtitle);

// `epd-bench soak`: every role process's RSS after each block (rss_mib[process][block]), and its change since
// block 2, the soak's growth measure. soak-rss.png
Plot soak_rss_plot(const std::vector<std::string>& processes, const std::vector<std::vector<double>>& rss_mib,
                   const std::string& subtitle);

}  // namespace epd::bench
