// examples/common: the files a training run writes. --checkpoint's folder is made at start (an
// unusable path fails before any training); --out holds log.csv (one row per epoch or evaluation),
// steps.csv (one row per logging interval) and curves.png, drawn by gnuplot from both, so that even
// a one-epoch run shows a curve.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <system_error>
#include <vector>

#include "ember/tensor/error.h"

namespace ember::examples {

// Makes the folder of `path` (a checkpoint file) now; an error naming the path when it cannot be
// made or when the path is a folder. "" (no checkpoint) is fine.
inline void prepare_checkpoint_path(const std::string& path) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  const fs::path p(path);
  std::error_code ec;
  EMBER_CHECK(!fs::is_directory(p, ec), "--checkpoint '", path,
              "' is a folder; give a file path, e.g. ", (p / "model.ckpt").string());
  if (p.has_parent_path() && !fs::exists(p.parent_path(), ec)) {
    fs::create_directories(p.parent_path(), ec);
    EMBER_CHECK(!ec, "--checkpoint '", path, "': cannot create its folder '",
                p.parent_path().string(), "': ", ec.message());
  }
  EMBER_CHECK(!p.has_parent_path() || fs::is_directory(p.parent_path(), ec), "--checkpoint '", path,
              "': '", p.parent_path().string(), "' is not a folder");
}

// A CSV file with a header, appended to when resuming a run (and the file exists).
class CsvLog {
 public:
  CsvLog() = default;
  CsvLog(const std::string& path, const std::string& header, bool append) {
    append = append && std::filesystem::exists(path);
    file_.open(path, append ? std::ios::app : std::ios::trunc);
    EMBER_CHECK(file_.good(), "cannot write ", path);
    if (!append) file_ << header << "\n";
  }
  void row(std::initializer_list<double> values) {
    if (!file_.is_open()) return;
    const char* sep = "";
    for (double v : values) {
      file_ << sep << v;
      sep = ",";
    }
    file_ << "\n";
    file_.flush();
  }
  void close() { file_.close(); }

 private:
  std::ofstream file_;
};

// One line of a plot: columns x:y of a CSV file in the run's folder.
struct Curve {
  std::string csv;  // file name inside the folder, e.g. "steps.csv"
  int x = 1, y = 2;
  std::string title;
  bool points = false;  // points on the line (one per epoch or evaluation)
};
struct Panel {
  std::string title;
  std::vector<Curve> curves;
  std::string yrange;  // e.g. "[0:1]", or "" for gnuplot's choice
};

// Writes <dir>/curves.gp and draws <dir>/curves.png with gnuplot (side by side panels); says so
// when gnuplot is missing or fails.
inline void write_plot(const std::string& dir, const std::string& xlabel,
                       const std::vector<Panel>& panels) {
  const std::string png = dir + "/curves.png", gp = dir + "/curves.gp";
  std::ofstream s(gp);
  s << "set terminal pngcairo size " << 500 * panels.size() << ",420 noenhanced\nset output '"
    << png << "'\nset datafile separator ','\nset key autotitle columnhead\n"
    << "set multiplot layout 1," << panels.size() << "\nset xlabel '" << xlabel << "'\n"
    << "set xrange [0:*]\n";  // from the start of training, also when a panel has one point
  for (const Panel& p : panels) {
    s << "set title '" << p.title << "'\n"
      << (p.yrange.empty() ? "set autoscale y" : "set yrange " + p.yrange) << "\nplot ";
    const char* sep = "";
    for (const Curve& c : p.curves) {
      s << sep << "'" << dir << "/" << c.csv << "' using " << c.x << ":" << c.y << " with "
        << (c.points ? "linespoints" : "lines") << " title '" << c.title << "'";
      sep = ", ";
    }
    s << "\n";
  }
  s << "unset multiplot\n";
  s.close();
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    std::printf("(gnuplot not found: %s not drawn; bash scripts/setup.sh installs it)\n",
                png.c_str());
    return;
  }
  if (std::system(("gnuplot '" + gp + "' 2>/dev/null").c_str()) != 0)
    std::printf("(gnuplot failed to draw %s)\n", png.c_str());
}

}  // namespace ember::examples
