// epd-bench's --plot module: what each plot kind writes (data columns and rows, the script's files and
// terminal), that gnuplot renders it, and that failures are reported with their cause.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <sstream>

#include "plot.hpp"
#include "plot_kinds.hpp"
#include "temp_dir.hpp"

using namespace epd::bench;
using epd::testing::is_png;
using epd::testing::read_file;
using epd::testing::TempDir;

namespace {

const DataFile* find_data(const Plot& p, const std::string& name) {
  for (const auto& d : p.data)
    if (d.name == name) return &d;
  return nullptr;
}

// The lines of a data file that are not comments, split into fields.
std::vector<std::vector<std::string>> rows_of(const std::string& text) {
  std::vector<std::vector<std::string>> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    out.emplace_back();
    for (std::string f; fields >> f;) out.back().push_back(f);
  }
  return out;
}

// The last comment line before the data: the column names.
std::string columns_of(const std::string& text) {
  std::istringstream in(text);
  std::string header;
  for (std::string line; std::getline(in, line) && (line.empty() || line[0] == '#');) header = line;
  return header;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::vector<TransferRow> transfer_rows() {
  std::vector<TransferRow> rows;
  for (uint64_t block : {4096ull, 1048576ull}) {
    rows.push_back({"memcpy", block, 1, block == 4096 ? 5.0 : 8.0, 0, "-", 0, 0});
    rows.push_back({"raw-tcp", block, 1, 1.5, 0, "-", 0, 0});
    rows.push_back({"zmq", block, 1, 0.5, 0, "-", 0, 0});
    rows.push_back({"shm", block, 1, block == 4096 ? 2.5 : 7.5, 1, "memcpy", block == 4096 ? 5.0 : 8.0, 0});
    rows.push_back({"shm", block, 8, 4.0, 1, "memcpy", block == 4096 ? 5.0 : 8.0, 0});
    rows.push_back({"tcp", block, 1, 1.25, 1, "raw-tcp", 1.5, 0.5});
  }
  return rows;
}

RequestRecord ok_request(double ttft, double router_ttft, std::vector<double> itl) {
  RequestRecord r;
  r.status = 200;
  r.ttft_ms = ttft;
  r.router_ttft_ms = router_ttft;
  r.itl_ms = std::move(itl);
  r.e2e_ms = ttft + 10;
  return r;
}

// Three levels of a comparison; llama-server's memory unmeasured at the last (NaN, no ratio).
std::vector<CompareLevel> compare_levels() {
  std::vector<CompareLevel> levels;
  for (size_t c : {1, 4, 16}) {
    CompareLevel l;
    l.concurrency = c;
    l.epd.requests_per_s = 100.0 * double(c);
    l.llama.requests_per_s = 50.0 * double(c);
    l.epd.output_tokens_per_s = 1000.0 * double(c);
    l.llama.output_tokens_per_s = 800.0 * double(c);
    l.epd.ttft = {10, 0, 2.0 * double(c), 0, 4.0 * double(c)};
    l.llama.ttft = {10, 0, 4.0 * double(c), 0, 2.0 * double(c)};
    l.epd.itl = {10, 0, 0.5, 0, 1.5};
    l.llama.itl = {10, 0, 1.0, 0, 1.5};
    l.epd.e2e = {10, 0, 8, 0, 16};
    l.llama.e2e = {10, 0, 10, 0, 20};
    l.epd_rss_mib = 230;
    l.llama_rss_mib = c == 16 ? 0 : 46;
    levels.push_back(l);
  }
  return levels;
}

}  // namespace

TEST_CASE("transfer plot: a data file per backend with a column per batch size and its baselines",
          "[bench][plot]") {
  const Plot p = transfer_bandwidth_plot(transfer_rows(), "the subtitle");
  REQUIRE(p.error.empty());
  CHECK(p.name == "transfer-bandwidth");
  REQUIRE(p.data.size() == 2);
  const DataFile* shm = find_data(p, "transfer-bandwidth.shm.dat");
  const DataFile* tcp = find_data(p, "transfer-bandwidth.tcp.dat");
  REQUIRE(shm);
  REQUIRE(tcp);
  CHECK(columns_of(shm->text) == "# block_bytes batch_1 batch_8 memcpy");
  CHECK(rows_of(shm->text) ==
        std::vector<std::vector<std::string>>{{"4096", "2.5", "4", "5"}, {"1048576", "7.5", "4", "8"}});
  // tcp was compared with raw TCP and ZeroMQ; it had no batch 8 row.
  CHECK(columns_of(tcp->text) == "# block_bytes batch_1 raw-tcp zmq");
  CHECK(rows_of(tcp->text) == std::vector<std::vector<std::string>>{{"4096", "1.25", "1.5", "0.5"},
                                                                    {"1048576", "1.25", "1.5", "0.5"}});
  // The script: PNG terminal and file, each data file plotted, block sizes on a log x axis with size labels.
  CHECK(contains(p.script, "set terminal pngcairo size 1200,540"));
  CHECK(contains(p.script, "set terminal png size 1200,540"));  // where gnuplot has no cairo
  CHECK(contains(p.script, "set output \"transfer-bandwidth.png\""));
  CHECK(contains(p.script, "plot \"transfer-bandwidth.shm.dat\" using 1:2"));
  CHECK(contains(p.script, "plot \"transfer-bandwidth.tcp.dat\" using 1:2"));
  CHECK(contains(
      p.script, "using 1:4 with linespoints lw 2 dt 3 pt 6 ps 0.8 lc rgb 'gray40' title \"zmq (baseline)\""));
  CHECK(contains(p.script, "set logscale x 2"));
  CHECK(contains(p.script, "set xtics (\"4 KiB\" 4096, \"1 MiB\" 1048576)"));
  CHECK(contains(p.script, "GB/s = 1e9 bytes/s"));
  CHECK(contains(p.script, "the subtitle"));
}

TEST_CASE("transfer plot: an unmeasured point is NaN and only baselines give nothing to draw",
          "[bench][plot]") {
  auto rows = transfer_rows();
  rows.push_back({"shm", 16 << 20, 1, 6.0, 1, "memcpy", 7.0, 0});  // 16 MiB: no batch 8 (does not fit)
  const Plot p = transfer_bandwidth_plot(rows, "");
  REQUIRE(p.error.empty());
  const auto shm = rows_of(find_data(p, "transfer-bandwidth.shm.dat")->text);
  REQUIRE(shm.size() == 3);
  CHECK(shm[2] == std::vector<std::string>{"16777216", "6", "NaN", "7"});

  std::vector<TransferRow> baselines_only = {{"memcpy", 4096, 1, 5.0, 0, "-", 0, 0}};
  CHECK(transfer_bandwidth_plot(baselines_only, "").error == "no engine rows to plot");
  TempDir dir("plot-empty");
  CHECK(render_plot(dir.path(), transfer_bandwidth_plot(baselines_only, "")) ==
        "transfer-bandwidth: no engine rows to plot");
}

TEST_CASE("serve plot: sorted CDFs of client and router TTFT and of ITL with failures left out",
          "[bench][plot]") {
  std::vector<RequestRecord> records = {ok_request(30, 25, {2, 1}), ok_request(10, 8, {3}),
                                        ok_request(20, -1, {})};
  RequestRecord failed;
  failed.status = 429;
  failed.error = "429 out_of_capacity";
  failed.ttft_ms = 1;
  records.push_back(failed);
  const Plot p = serve_latency_plot(records, "");
  REQUIRE(p.error.empty());
  using Rows = std::vector<std::vector<std::string>>;
  CHECK(rows_of(find_data(p, "serve-latency-cdf.ttft.dat")->text) ==
        Rows{{"10", "0.333333"}, {"20", "0.666667"}, {"30", "1"}});
  CHECK(rows_of(find_data(p, "serve-latency-cdf.router-ttft.dat")->text) == Rows{{"8", "0.5"}, {"25", "1"}});
  CHECK(rows_of(find_data(p, "serve-latency-cdf.itl.dat")->text) ==
        Rows{{"1", "0.333333"}, {"2", "0.666667"}, {"3", "1"}});
  CHECK(columns_of(find_data(p, "serve-latency-cdf.ttft.dat")->text) == "# ms fraction_at_or_below");
  CHECK(contains(p.script, "set multiplot layout 1,2"));
  CHECK(contains(p.script, "set logscale x 10"));
  CHECK(contains(p.script, "plot \"serve-latency-cdf.ttft.dat\" using 1:2 with steps"));
  CHECK(contains(p.script, "\"serve-latency-cdf.router-ttft.dat\" using 1:2 with steps"));
  CHECK(contains(p.script, "plot \"serve-latency-cdf.itl.dat\" using 1:2 with steps"));
  CHECK(contains(p.script, "client TTFT: n=3, p50 20 ms, p99 30 ms"));

  // Whole answers (--no-stream) have no gaps: one panel; no successful request: nothing to draw.
  const Plot whole = serve_latency_plot({ok_request(5, 4, {})}, "");
  CHECK(whole.data.size() == 2);
  CHECK(contains(whole.script, "set multiplot layout 1,1"));
  CHECK_FALSE(contains(whole.script, "itl.dat"));
  CHECK_FALSE(contains(whole.script, "inter-token"));
  CHECK(serve_latency_plot({failed}, "").error == "no successful request with a first token");
}

TEST_CASE("ring plot: used and peak in bytes and in percent of the ring", "[bench][plot]") {
  const std::vector<RingSample> samples = {{0, 0, 0, 0}, {50, 1024, 2048, 4096}, {100, 0, 4096, 4096}};
  const Plot p = ring_occupancy_plot(samples, "");
  REQUIRE(p.error.empty());
  const DataFile* d = find_data(p, "staging-ring.dat");
  REQUIRE(d);
  CHECK(columns_of(d->text) == "# t_s ring_used_bytes ring_peak_bytes ring_bytes used_pct peak_pct");
  CHECK(rows_of(d->text) ==
        std::vector<std::vector<std::string>>{{"0", "0", "0", "0", "0", "0"},
                                              {"0.05", "1024", "2048", "4096", "25", "50"},
                                              {"0.1", "0", "4096", "4096", "0", "100"}});
  CHECK(contains(p.script, "set output \"staging-ring.png\""));
  CHECK(contains(p.script, "plot \"staging-ring.dat\" using 1:6 with steps"));
  CHECK(contains(p.script, "ring in use (% of 0.00391 MiB)"));
  CHECK(contains(p.script, "set yrange [0:110]"));          // 10 % above the highest use
  CHECK(contains(p.script, "set y2range [0:0.00429688]"));  // the same, in MiB

  CHECK_FALSE(ring_occupancy_plot({}, "").error.empty());
  CHECK(contains(ring_occupancy_plot({{0, 0, 0, 0}}, "").error, "no decode reported a staging ring"));
}

TEST_CASE("soak plot: RSS per block and its change since block 2", "[bench][plot]") {
  const Plot p = soak_rss_plot({"router", "decode-0"}, {{10, 20, 21, 22}, {100, 200, 200, 100}}, "");
  REQUIRE(p.error.empty());
  using Rows = std::vector<std::vector<std::string>>;
  const DataFile* rss = find_data(p, "soak-rss.dat");
  const DataFile* growth = find_data(p, "soak-rss-growth.dat");
  REQUIRE(rss);
  REQUIRE(growth);
  CHECK(columns_of(rss->text) == "# block router_mib decode-0_mib");
  CHECK(rows_of(rss->text) ==
        Rows{{"1", "10", "100"}, {"2", "20", "200"}, {"3", "21", "200"}, {"4", "22", "100"}});
  CHECK(columns_of(growth->text) == "# block router_pct decode-0_pct");
  CHECK(rows_of(growth->text) ==
        Rows{{"1", "-50", "-50"}, {"2", "0", "0"}, {"3", "5", "0"}, {"4", "10", "-50"}});
  CHECK(contains(p.script, "plot \"soak-rss.dat\" using 1:2 with linespoints"));
  CHECK(contains(p.script, "\"\" using 1:3 with linespoints lw 2 pt 7 ps 0.8 title \"decode-0\""));
  CHECK(contains(p.script, "plot \"soak-rss-growth.dat\" using 1:2"));
  CHECK(soak_rss_plot({}, {}, "").error == "no RSS was measured");
}

TEST_CASE("compare plot: a data file per panel with both servers and their ratio per concurrency level",
          "[bench][plot]") {
  const Plot p = serve_compare_plot(compare_levels(), "the workload");
  REQUIRE(p.error.empty());
  CHECK(p.name == "serve-compare");
  const DataFile* throughput = find_data(p, "serve-compare.throughput.dat");
  REQUIRE(throughput);
  CHECK(columns_of(throughput->text) ==
        "# index concurrency epd_req_s llama_req_s ratio_req_s epd_tok_s llama_tok_s ratio_tok_s");
  CHECK(rows_of(throughput->text) == std::vector<std::vector<std::string>>{
                                         {"0", "1", "100", "50", "2.00x", "1000", "800", "1.25x"},
                                         {"1", "4", "400", "200", "2.00x", "4000", "3200", "1.25x"},
                                         {"2", "16", "1600", "800", "2.00x", "16000", "12800", "1.25x"}});
  const DataFile* ttft = find_data(p, "serve-compare.ttft.dat");
  REQUIRE(ttft);
  CHECK(columns_of(ttft->text) ==
        "# index concurrency epd_p50 llama_p50 ratio_p50 epd_p99 llama_p99 ratio_p99");
  CHECK(rows_of(ttft->text)[2] ==
        std::vector<std::string>{"2", "16", "32", "64", "0.50x", "64", "32", "2.00x"});
  for (const char* name : {"serve-compare.itl.dat", "serve-compare.e2e.dat"}) {
    INFO(name);
    const DataFile* d = find_data(p, name);
    REQUIRE(d);
    CHECK(rows_of(d->text).size() == 3);
  }
  CHECK(rows_of(find_data(p, "serve-compare.e2e.dat")->text)[0] ==
        std::vector<std::string>{"0", "1", "8", "10", "0.80x", "16", "20", "0.80x"});
  const DataFile* rss = find_data(p, "serve-compare.rss.dat");
  REQUIRE(rss);
  CHECK(rows_of(rss->text)[0] == std::vector<std::string>{"0", "1", "230", "46", "5.00x"});
  CHECK(rows_of(rss->text)[2] == std::vector<std::string>{"2", "16", "230", "NaN", "-"});  // not measured
  CHECK(p.data.size() == 5);
  // Six panels, each naming its file; the levels as the x tics; the ratios drawn as labels.
  for (const auto& d : p.data) CHECK(contains(p.script, "\"" + d.name + "\""));
  size_t panels = 0;
  for (size_t at = p.script.find("\nplot "); at != std::string::npos; at = p.script.find("\nplot ", at + 1))
    ++panels;
  CHECK(panels == 6);
  CHECK(contains(p.script, "set multiplot layout 2,3"));
  CHECK(contains(p.script, "set xtics (\"1\" 0, \"4\" 1, \"16\" 2)"));
  CHECK(contains(p.script, "with labels"));
  CHECK(contains(p.script, "the workload"));

  TempDir dir("plot-compare");
  REQUIRE(render_plot(dir.path(), p) == "");
  CHECK(is_png(dir / "serve-compare.png"));
  CHECK(serve_compare_plot({}, "").error == "no concurrency level was measured");
}

TEST_CASE("render_plot writes the data and the script next to the PNG gnuplot draws", "[bench][plot]") {
  TempDir dir("plot-render");
  const auto where = dir / "nested" / "plots";  // created on the way
  std::vector<RequestRecord> records;
  for (int i = 1; i <= 50; ++i) records.push_back(ok_request(i, i * 0.8, {0.01 * i, 0.5}));
  // Titles carry whatever a config or a flag said: quotes, backslashes and underscores stay text.
  const std::vector<Plot> plots = {
      transfer_bandwidth_plot(transfer_rows(), "a \"quoted\" subtitle \\ with a backslash"),
      serve_latency_plot(records, "serve"),
      ring_occupancy_plot({{0, 0, 1024, 4096}, {500, 2048, 3072, 4096}, {1000, 0, 5000, 4096}}, "ring"),
      soak_rss_plot({"router", "decode_\"0\""}, {{10, 11, 11}, {20, 21, 22}}, "soak"),
      serve_compare_plot(compare_levels(), "compare")};
  for (const Plot& p : plots) {
    INFO(p.name);
    REQUIRE(render_plot(where, p) == "");
    CHECK(is_png(where / p.png_file()));
    CHECK(read_file(where / p.script_file()) == p.script);
    for (const auto& d : p.data) CHECK(read_file(where / d.name) == d.text);
    // The script alone re-renders it, from its own directory.
    std::filesystem::remove(where / p.png_file());
    CHECK(run_gnuplot(where, p.script_file()) == "");
    CHECK(is_png(where / p.png_file()));
  }
}

TEST_CASE("a failing gnuplot run comes back with its stderr", "[bench][plot]") {
  TempDir dir("plot-fail");
  Plot p;
  p.name = "broken";
  p.script = "set terminal png\nset output 'broken.png'\nplot 'no-such-file.dat' using 1:2\n";
  const std::string e = render_plot(dir.path(), p);
  INFO(e);
  CHECK(contains(e, "gnuplot broken.gp in " + dir.path().string() + " failed (exit status 1)"));
  CHECK(contains(e, "no-such-file.dat"));  // gnuplot's own words
  CHECK(contains(run_gnuplot(dir.path(), "missing-script.gp"), "failed (exit status"));
}

TEST_CASE("a plot directory that cannot be made and a missing gnuplot are named", "[bench][plot]") {
  TempDir dir("plot-dir");
  std::ofstream(dir / "a-file") << "x";
  const std::string e = prepare_plot_dir(dir / "a-file" / "plots");
  CHECK(contains(e, "cannot create plot directory " + (dir / "a-file" / "plots").string()));

  CHECK(find_gnuplot("/usr/bin") == "/usr/bin/gnuplot");
  CHECK(find_gnuplot(dir.path().string() + ":/nonexistent") == "");
  // A directory entry named gnuplot, or a file that is not executable, is not gnuplot.
  std::filesystem::create_directories(dir / "d" / "gnuplot");
  std::ofstream(dir / "gnuplot") << "#!/bin/sh\n";
  CHECK(find_gnuplot((dir / "d").string() + ":" + dir.path().string()) == "");

  const char* saved = std::getenv("PATH");
  const std::string path = saved ? saved : "";
  ::setenv("PATH", dir.path().c_str(), 1);
  const std::string missing = prepare_plot_dir(dir / "plots");
  const std::string run = run_gnuplot(dir.path(), "x.gp");
  ::setenv("PATH", path.c_str(), 1);
  CHECK(contains(missing, "gnuplot not found on PATH: install the Debian package gnuplot-nox"));
  CHECK(run == missing);
}
