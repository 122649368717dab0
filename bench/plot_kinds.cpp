#include "plot_kinds.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <set>
#include <sstream>

#include "stats.hpp"

namespace epd::bench {
namespace {

constexpr int kWidth = 900, kHeight = 540, kPanelWidth = 600;

// A gnuplot double-quoted string: titles may hold anything a config or a flag gave.
std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\', out += c;
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out + "\"";
}

std::string num(double v) {
  if (!std::isfinite(v)) return "NaN";  // gnuplot skips the point and breaks the line there
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

// A name usable in a file name and a column header.
std::string token(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') c = '_';
  return s;
}

std::string size_label(uint64_t b) {
  if (b >= (1u << 20) && b % (1u << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

std::string title(const std::string& main, const std::string& subtitle) {
  return quote(subtitle.empty() ? main : main + "\n" + subtitle);
}

// The first lines of every script: pngcairo, or libgd's png where gnuplot was built without cairo; plain
// text (no enhanced-mode markup, so "decode_0" keeps its underscore).
std::string preamble(const Plot& p, const std::string& what, int width, int height) {
  std::ostringstream s;
  s << "# " << what << ", written by epd-bench --plot.\n"
    << "# Re-render in this directory: gnuplot " << p.script_file() << "\n"
    << "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
    << "  set terminal pngcairo size " << width << "," << height << " noenhanced font 'sans,10'\n"
    << "} else {\n"
    << "  set terminal png size " << width << "," << height << " noenhanced\n"
    << "}\n"
    << "set output " << quote(p.png_file()) << "\n"
    << "set grid\n";
  return s.str();
}

// Panels side by side with the same margins, so their plot areas line up whatever their keys and tic labels;
// `bottom_px` leaves room for tic labels, the x label and a key below.
// `rows` > 1 stacks rows of `panels` each, `row_gap_px` apart (room for the upper row's tics and labels).
std::string multiplot(int panels, int width, int bottom_px, const std::string& title_text, int rows = 1,
                      int height = kHeight, int row_gap_px = 0) {
  auto frac = [](double px, double of) { return num(px / of); };
  std::ostringstream s;
  s << "set multiplot layout " << rows << "," << panels << " margins " << frac(75, width) << ","
    << num(1 - 25.0 / width) << "," << frac(bottom_px, height) << "," << num(1 - 80.0 / height) << " spacing "
    << frac(85, width);
  if (rows > 1) s << "," << frac(row_gap_px, height);
  s << " title " << title_text << "\n";
  return s.str();
}

// One CDF: sorted values and the fraction of samples at or below each.
DataFile cdf_file(const std::string& name, const std::string& what, std::vector<double> v) {
  std::sort(v.begin(), v.end());
  std::ostringstream s;
  s << "# " << what << ": " << v.size() << " samples\n# ms fraction_at_or_below\n";
  for (size_t i = 0; i < v.size(); ++i)
    s << num(v[i]) << " " << num(double(i + 1) / double(v.size())) << "\n";
  return {name, s.str()};
}

std::string cdf_title(const std::string& what, const std::vector<double>& v) {
  char b[160];
  std::snprintf(b, sizeof b, "%s: n=%zu, p50 %.3g ms, p99 %.3g ms", what.c_str(), v.size(), percentile(v, 50),
                percentile(v, 99));
  return b;
}

// The horizontal guides of a CDF panel, at the median and the 99th percentile.
const char* const kCdfAxes =
    "set logscale x 10\n"
    "set yrange [0:1.02]\n"
    "set ytics 0.1\n"
    "set key below\n"  // titles carry n, p50 and p99: too wide to sit inside next to a curve

    "set arrow 1 from graph 0, first 0.5 to graph 1, first 0.5 nohead dt 3 lc rgb 'gray50'\n"
    "set arrow 2 from graph 0, first 0.99 to graph 1, first 0.99 nohead dt 3 lc rgb 'gray50'\n";

}  // namespace

Plot transfer_bandwidth_plot(const std::vector<TransferRow>& rows, const std::string& subtitle) {
  Plot p;
  p.name = "transfer-bandwidth";
  std::vector<std::string> backends;  // engine backends, in table order
  for (const auto& r : rows)
    if (r.baseline != "-" && std::find(backends.begin(), backends.end(), r.backend) == backends.end())
      backends.push_back(r.backend);
  if (backends.empty()) {
    p.error = "no engine rows to plot";
    return p;
  }
  const int width = backends.size() == 1 ? kWidth : kPanelWidth * int(backends.size());
  std::ostringstream s;
  s << preamble(p, "epd-bench transfer: bandwidth vs block size", width, kHeight)
    << multiplot(int(backends.size()), width, 125,
                 title("epd-bench transfer: bandwidth vs block size, against baselines from the same run",
                       subtitle));
  for (const auto& backend : backends) {
    std::set<uint64_t> blocks, batches;
    std::vector<std::string> baselines;  // this backend's: its own, then ZeroMQ where it was compared
    bool zmq = false;
    for (const auto& r : rows) {
      if (r.backend != backend) continue;
      blocks.insert(r.block);
      batches.insert(r.batch);
      if (std::find(baselines.begin(), baselines.end(), r.baseline) == baselines.end())
        baselines.push_back(r.baseline);
      zmq |= r.zmq_gbps > 0;
    }
    if (zmq) baselines.push_back("zmq");
    auto engine = [&](uint64_t block, uint64_t batch) {
      for (const auto& r : rows)
        if (r.backend == backend && r.block == block && r.batch == batch) return &r;
      return static_cast<const TransferRow*>(nullptr);
    };
    // Wide table: one row per block size; a column per batch size, then the baselines.
    std::ostringstream d;
    d << "# epd-bench transfer, backend " << backend
      << ": GB/s (1e9 bytes/s); NaN = not measured\n# block_bytes";
    for (uint64_t b : batches) d << " batch_" << b;
    for (const auto& b : baselines) d << " " << token(b);
    d << "\n";
    for (uint64_t block : blocks) {
      d << block;
      const TransferRow* any = nullptr;
      for (uint64_t batch : batches) {
        const TransferRow* r = engine(block, batch);
        d << " " << (r ? num(r->gbps) : "NaN");
        if (r && !any) any = r;
      }
      for (const auto& b : baselines) {
        double v = NAN;
        if (any) v = b == "zmq" ? any->zmq_gbps : any->baseline_gbps;
        d << " " << num(v);
      }
      d << "\n";
    }
    const std::string file = p.name + "." + token(backend) + ".dat";
    p.data.push_back({file, d.str()});

    std::string base_names;
    for (const auto& b : baselines) base_names += (base_names.empty() ? "" : ", ") + b;
    s << "set title " << quote(backend + " vs " + base_names) << "\n"
      << "set logscale x 2\n"
      << "set xrange [" << num(double(*blocks.begin()) / 1.5) << ":" << num(double(*blocks.rbegin()) * 1.5)
      << "]\nset xtics (";
    for (auto it = blocks.begin(); it != blocks.end(); ++it)
      s << (it == blocks.begin() ? "" : ", ") << quote(size_label(*it)) << " " << *it;
    s << ")\nset xlabel 'block size (log scale)'\n"
      << "set ylabel 'bandwidth (GB/s = 1e9 bytes/s)'\n"
      << "set yrange [0:*]\n"
      << "set key below\n"
      << "plot ";
    // Columns: 1 block, then one per batch size, then one per baseline.
    int column = 1;
    for (uint64_t b : batches) {
      ++column;
      s << (column == 2 ? quote(file) : ", \\\n     \"\"") << " using 1:" << column
        << " with linespoints lw 2 pt 7 ps 0.8 title " << quote(backend + ", batch " + std::to_string(b));
    }
    const char* const colors[] = {"black", "gray40", "gray65"};
    for (size_t i = 0; i < baselines.size(); ++i) {
      ++column;
      s << ", \\\n     \"\" using 1:" << column << " with linespoints lw 2 dt " << 2 + i
        << " pt 6 ps 0.8 lc rgb '" << colors[std::min<size_t>(i, 2)] << "' title "
        << quote(baselines[i] + " (baseline)");
    }
    s << "\n";
  }
  s << "unset multiplot\nunset output\n";
  p.script = s.str();
  return p;
}

Plot serve_latency_plot(const std::vector<RequestRecord>& records, const std::string& subtitle) {
  Plot p;
  p.name = "serve-latency-cdf";
  std::vector<double> ttft, router, itl;
  for (const auto& r : records) {
    if (!r.error.empty()) continue;
    if (r.ttft_ms >= 0) ttft.push_back(r.ttft_ms);
    if (r.router_ttft_ms >= 0) router.push_back(r.router_ttft_ms);
    itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
  }
  if (ttft.empty()) {
    p.error = "no successful request with a first token";
    return p;
  }
  const bool itl_panel = !itl.empty();  // whole answers (--no-stream) have no gaps
  const std::string ttft_file = p.name + ".ttft.dat", router_file = p.name + ".router-ttft.dat",
                    itl_file = p.name + ".itl.dat";
  p.data.push_back(cdf_file(ttft_file, "client TTFT", ttft));
  if (!router.empty()) p.data.push_back(cdf_file(router_file, "router TTFT (epd.first_token_ms)", router));
  if (itl_panel) p.data.push_back(cdf_file(itl_file, "inter-token latency (between content events)", itl));

  std::ostringstream s;
  const int width = itl_panel ? 2 * kPanelWidth : kWidth;
  s << preamble(p, "epd-bench serve: latency CDFs", width, kHeight)
    << multiplot(itl_panel ? 2 : 1, width, 100,
                 title("epd-bench serve: latency CDFs (dotted: p50, p99)", subtitle))
    << kCdfAxes << "set title 'time to first token'\n"
    << "set xlabel 'TTFT (ms, log scale)'\nset ylabel 'fraction of requests at or below'\n"
    << "plot " << quote(ttft_file) << " using 1:2 with steps lw 2 title "
    << quote(cdf_title("client TTFT", ttft));
  if (!router.empty())
    s << ", \\\n     " << quote(router_file) << " using 1:2 with steps lw 2 dt 2 title "
      << quote(cdf_title("router's own TTFT", router));
  s << "\n";
  if (itl_panel)
    s << "set title 'inter-token latency'\n"
      << "set xlabel 'gap between content events (ms, log scale)'\nset ylabel 'fraction of gaps at or "
         "below'\n"
      << "plot " << quote(itl_file) << " using 1:2 with steps lw 2 lc 3 title "
      << quote(cdf_title("ITL", itl)) << "\n";
  s << "unset multiplot\nunset output\n";
  p.script = s.str();
  return p;
}

namespace compare_plot {

// "1.59x" ("0.0043x" below 0.1, so a tiny ratio does not read as 0), or "-" where a figure is missing.
std::string ratio_label(double epd, double llama) {
  if (!(llama > 0) || !(epd > 0)) return "-";
  char b[32];
  std::snprintf(b, sizeof b, epd / llama < 0.1 ? "%.2gx" : "%.2fx", epd / llama);
  return b;
}

// A figure, or NaN where it was not measured: gnuplot draws no bar for it.
double measured(double v) {
  return v > 0 ? v : NAN;
}

// A row per level: "index concurrency", then per figure epd's, llama-server's and the ratio of the two.
DataFile level_file(const std::string& name, const std::string& what, const std::vector<CompareLevel>& levels,
                    const std::vector<std::string>& figures,
                    const std::function<std::pair<double, double>(const CompareLevel&, size_t)>& pick) {
  std::ostringstream d;
  d << "# epd-bench serve --compare llama-server: " << what << "\n# index concurrency";
  for (const auto& f : figures) d << " epd_" << f << " llama_" << f << " ratio_" << f;
  d << "\n";
  for (size_t i = 0; i < levels.size(); ++i) {
    d << i << " " << levels[i].concurrency;
    for (size_t k = 0; k < figures.size(); ++k) {
      const auto [e, l] = pick(levels[i], k);
      d << " " << num(measured(e)) << " " << num(measured(l)) << " " << ratio_label(e, l);
    }
    d << "\n";
  }
  return {name, d.str()};
}

const char* const kEpdColor = "#1f6fb4";
const char* const kLlamaColor = "#e8801a";

}  // namespace compare_plot

Plot serve_compare_plot(const std::vector<CompareLevel>& levels, const std::string& subtitle) {
  using namespace compare_plot;
  Plot p;
  p.name = "serve-compare";
  if (levels.empty()) {
    p.error = "no concurrency level was measured";
    return p;
  }
  const std::string throughput = p.name + ".throughput.dat", ttft = p.name + ".ttft.dat",
                    itl = p.name + ".itl.dat", e2e = p.name + ".e2e.dat", rss = p.name + ".rss.dat";
  p.data.push_back(level_file(throughput, "successful requests/s and output tokens/s", levels,
                              {"req_s", "tok_s"}, [](const CompareLevel& l, size_t k) {
                                return k == 0 ? std::pair{l.epd.requests_per_s, l.llama.requests_per_s}
                                              : std::pair{l.epd.output_tokens_per_s,
                                                          l.llama.output_tokens_per_s};
                              }));
  auto latency = [&](const std::string& file, const std::string& what, Dist Summary::*d) {
    p.data.push_back(level_file(file, what + " (ms), p50 and p99", levels, {"p50", "p99"},
                                [d](const CompareLevel& l, size_t k) {
                                  return k == 0 ? std::pair{(l.epd.*d).p50, (l.llama.*d).p50}
                                                : std::pair{(l.epd.*d).p99, (l.llama.*d).p99};
                                }));
  };
  latency(ttft, "time to first token", &Summary::ttft);
  latency(itl, "inter-token latency (between content events)", &Summary::itl);
  latency(e2e, "end to end", &Summary::e2e);
  p.data.push_back(
      level_file(rss,
                 "peak RSS so far (MiB): the sum of VmHWM over each server's processes after the "
                 "level; NaN = not measured",
                 levels, {"mib"}, [](const CompareLevel& l, size_t) {
                   return std::pair{l.epd_rss_mib, l.llama_rss_mib};
                 }));

  const int width = 3 * 520, height = 2 * 400 + 80;
  std::ostringstream s;
  s << preamble(p, "epd-bench serve --compare llama-server", width, height)
    << multiplot(3, width, 70,
                 title("epd-bench serve --compare llama-server: both servers per concurrency level "
                       "(over each group: epd / llama-server)",
                       subtitle),
                 2, height, 95)
    << "set style fill solid 0.9 border -1\n"
    << "set xrange [-0.6:" << num(double(levels.size()) - 0.4) << "]\nset xtics (";
  for (size_t i = 0; i < levels.size(); ++i)
    s << (i ? ", " : "") << quote(std::to_string(levels[i].concurrency)) << " " << i;
  s << ")\nset xlabel 'concurrency (requests in flight)'\nset yrange [0:*]\nset offsets 0, 0, graph 0.3, 0\n"
    << "set key top left maxrows 2 samplen 1.5\nset grid noxtics ytics\n"
    << "max(a, b) = (a != a) ? b : (b != b) ? a : (a > b ? a : b)\n";  // NaN-safe: only NaN != itself
  // Two bars per level (epd, llama-server) and their ratio over them.
  auto pair_panel = [&](const std::string& file, const std::string& what, const std::string& ylabel,
                        int col) {
    s << "set title " << quote(what) << "\nset ylabel " << quote(ylabel) << "\n"
      << "plot " << quote(file) << " using ($1-0.18):" << col << ":(0.34) with boxes lc rgb '" << kEpdColor
      << "' title 'epd', \\\n     \"\" using ($1+0.18):" << col + 1 << ":(0.34) with boxes lc rgb '"
      << kLlamaColor << "' title 'llama-server', \\\n     \"\" using 1:(max(column(" << col << "), column("
      << col + 1 << "))):" << col + 2 << " with labels offset 0,0.8 notitle\n";
  };
  // Four bars per level: p50 (solid) and p99 (light) of each server, each pair's ratio over it.
  auto latency_panel = [&](const std::string& file, const std::string& what, const std::string& ylabel) {
    s << "set title " << quote(what) << "\nset ylabel " << quote(ylabel) << "\n"
      << "plot " << quote(file) << " using ($1-0.3):3:(0.19) with boxes lc rgb '" << kEpdColor
      << "' title 'epd p50', \\\n     \"\" using ($1-0.1):4:(0.19) with boxes lc rgb '" << kLlamaColor
      << "' title 'llama-server p50', \\\n     \"\" using ($1+0.1):6:(0.19) with boxes fs solid 0.35 lc rgb '"
      << kEpdColor
      << "' title 'epd p99', \\\n     \"\" using ($1+0.3):7:(0.19) with boxes fs solid 0.35 lc rgb '"
      << kLlamaColor << "' title 'llama-server p99', \\\n"
      << "     \"\" using ($1-0.2):(max($3, $4)):5 with labels offset 0,0.8 font ',9' notitle, \\\n"
      << "     \"\" using ($1+0.2):(max($6, $7)):8 with labels offset 0,0.8 font ',9' notitle\n";
  };
  pair_panel(throughput, "throughput: requests/s", "successful requests/s", 3);
  pair_panel(throughput, "throughput: output tokens/s", "output tokens/s", 6);
  pair_panel(rss, "peak RSS of each server's processes, so far", "MiB (sum of VmHWM)", 3);
  // Log scale: a server that stalls under load has tails 100x its median, which would flatten the rest.
  s << "set logscale y 10\nset yrange [*:*]\nset offsets 0, 0, graph 0.12, 0\nset format y '%g'\n";
  latency_panel(ttft, "time to first token: p50, p99", "TTFT (ms, log scale)");
  latency_panel(itl, "inter-token latency: p50, p99", "ITL (ms, log scale)");
  latency_panel(e2e, "end to end: p50, p99", "E2E (ms, log scale)");
  s << "unset multiplot\nunset output\n";
  p.script = s.str();
  return p;
}

Plot ring_occupancy_plot(const std::vector<RingSample>& samples, const std::string& subtitle) {
  Plot p;
  p.name = "staging-ring";
  uint64_t ring = 0;
  double top = 0;  // highest % seen
  for (const auto& x : samples) ring = std::max(ring, x.ring);
  if (samples.empty() || ring == 0) {
    p.error = samples.empty() ? "no /v1/instances sample was read"
                              : "no decode reported a staging ring (does the staged cluster's decode use "
                                "another KV layout than prefill?)";
    return p;
  }
  std::ostringstream d;
  d << "# staging ring of the decode instances (summed), from GET /v1/instances every ~50 ms; the figures\n"
    << "# change once per heartbeat. pct = % of the ring (" << ring << " bytes)\n"
    << "# t_s ring_used_bytes ring_peak_bytes ring_bytes used_pct peak_pct\n";
  for (const auto& x : samples) {
    const double used = 100.0 * double(x.used) / double(ring), peak = 100.0 * double(x.peak) / double(ring);
    top = std::max({top, used, peak});
    d << num(x.t_ms / 1000) << " " << x.used << " " << x.peak << " " << x.ring << " " << num(used) << " "
      << num(peak) << "\n";
  }
  const std::string file = p.name + ".dat";
  p.data.push_back({file, d.str()});
  const double ymax = std::max(105.0, top * 1.1), mib = double(ring) / (1 << 20);
  char ylabel[96];
  std::snprintf(ylabel, sizeof ylabel, "ring in use (%% of %.3g MiB)", mib);
  std::ostringstream s;
  s << preamble(p, "epd-bench e2e: staging ring occupancy", kWidth, kHeight) << "set title "
    << title("epd-bench e2e: decode staging ring in use during the staged throughput run", subtitle) << "\n"
    << "set xlabel 'time since the throughput run started (s)'\n"
    << "set ylabel " << quote(ylabel) << "\n"
    << "set yrange [0:" << num(ymax) << "]\n"
    << "set y2label 'ring in use (MiB)'\nset y2range [0:" << num(ymax * mib / 100)
    << "]\nset y2tics\nset ytics nomirror\n"
    << "set arrow 1 from graph 0, first 100 to graph 1, first 100 nohead dt 2 lc rgb 'red'\n"
    << "set label 1 'full (above: grants waiting for the watermark)' at graph 0.01, first 100 offset 0,0.7 "
       "tc rgb 'red'\n"
    << "set key top right box opaque\n"
    << "plot " << quote(file)
    << " using 1:6 with steps lw 2 title 'highest use per heartbeat (ring_peak)', \\\n"
    << "     \"\" using 1:5 with steps lw 1.5 title 'in use at the heartbeat (ring_used)'\n"
    << "unset output\n";
  p.script = s.str();
  return p;
}

Plot soak_rss_plot(const std::vector<std::string>& processes, const std::vector<std::vector<double>>& rss_mib,
                   const std::string& subtitle) {
  Plot p;
  p.name = "soak-rss";
  if (processes.empty() || rss_mib.size() != processes.size() || rss_mib[0].empty()) {
    p.error = "no RSS was measured";
    return p;
  }
  const size_t blocks = rss_mib[0].size(), base = blocks >= 2 ? 1 : 0;  // block 1 is warm-up
  std::ostringstream d, g;
  d << "# epd-bench soak: VmRSS after each block (MiB)\n# block";
  g << "# epd-bench soak: RSS change since block " << base + 1 << " (%)\n# block";
  for (const auto& id : processes) {
    d << " " << token(id) << "_mib";
    g << " " << token(id) << "_pct";
  }
  d << "\n";
  g << "\n";
  for (size_t b = 0; b < blocks; ++b) {
    d << b + 1;
    g << b + 1;
    for (const auto& series : rss_mib) {
      const double v = b < series.size() ? series[b] : NAN;
      d << " " << num(v);
      g << " " << num(base < series.size() && series[base] > 0 ? 100.0 * (v / series[base] - 1) : NAN);
    }
    d << "\n";
    g << "\n";
  }
  const std::string file = p.name + ".dat", growth = p.name + "-growth.dat";
  p.data.push_back({file, d.str()});
  p.data.push_back({growth, g.str()});

  std::ostringstream s;
  s << preamble(p, "epd-bench soak: RSS per block", 2 * kPanelWidth, kHeight)
    << multiplot(2, 2 * kPanelWidth, 110,
                 title("epd-bench soak: resident memory of every role process", subtitle))
    << "set xrange [0.5:" << blocks << ".5]\n"
    << (blocks <= 20 ? "set xtics 1\n" : "") << "set xlabel 'block'\nset key below\n";
  auto panel = [&](const std::string& f, const std::string& what, const char* ylabel, const char* yrange) {
    s << "set title " << quote(what) << "\nset ylabel " << quote(ylabel) << "\n" << yrange << "plot ";
    for (size_t i = 0; i < processes.size(); ++i)
      s << (i ? ", \\\n     " : "") << quote(i ? "" : f) << " using 1:" << i + 2
        << " with linespoints lw 2 pt 7 ps 0.8 title " << quote(processes[i]);
    s << "\n";
  };
  panel(file, "VmRSS after each block", "RSS (MiB)", "set yrange [0:*]\n");
  panel(growth, "change since block " + std::to_string(base + 1) + " (block 1 is warm-up)", "RSS change (%)",
        "set yrange [*:*]\n");
  s << "unset multiplot\nunset output\n";
  p.script = s.str();
  return p;
}

}  // namespace epd::bench
