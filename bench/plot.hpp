#pragma once
// `epd-bench ... --plot DIR`: a plot is a gnuplot script and its data files (whitespace-separated columns),
// written into DIR next to the PNG the script renders, so a figure can be inspected or re-rendered
// (`cd DIR && gnuplot NAME.gp`). gnuplot is Debian's gnuplot-nox, run as a child process without a shell.
#include <filesystem>
#include <string>
#include <vector>

namespace epd::bench {

struct DataFile {
  std::string name;  // a file name inside the plot directory
  std::string text;  // columns separated by spaces; '#' lines are comments
};

struct Plot {
  std::string name;    // NAME.gp renders NAME.png
  std::string script;  // gnuplot commands; file names in it are relative to the plot directory
  std::vector<DataFile> data;
  std::string error;  // non-empty: why there is nothing to draw (render_plot returns it)

  std::string script_file() const { return name + ".gp"; }
  std::string png_file() const { return name + ".png"; }
};

// The first executable named `gnuplot` in `path` (a $PATH-style, colon-separated list); "" if none.
std::string find_gnuplot(const std::string& path);

// Creates DIR and checks that gnuplot can be found, so a bench fails before it measures for minutes;
// "" or what is wrong.
std::string prepare_plot_dir(const std::filesystem::path& dir);

// Writes the plot's script and data files into DIR; "" or what could not be written.
std::string write_plot(const std::filesystem::path& dir, const Plot& plot);

// Runs gnuplot on DIR/SCRIPT with DIR as its working directory; "" or why it failed, with gnuplot's stderr.
std::string run_gnuplot(const std::filesystem::path& dir, const std::string& script);

// write_plot, run_gnuplot and a check that the PNG is there; "" or what failed.
std::string render_plot(const std::filesystem::path& dir, const Plot& plot);

}  // namespace epd::bench
