// Checks of examples/common (ctest examples.common): UTF-8 repair of sampled text, the
// --checkpoint folder made at start, the progress line ended before other output, and the --help
// layout (defaults shown, no "{false}"). Plain asserts: prints each failure, exits 1 if any.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/cli_help.h"
#include "common/progress.h"
#include "common/run_files.h"
#include "common/utf8.h"

namespace fs = std::filesystem;
using namespace ember::examples;

namespace {
int failures = 0;
void check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "FAILED: %s\n", what.c_str());
    ++failures;
  }
}
const std::string kFFFD = "\xEF\xBF\xBD";

void test_utf8() {
  const std::string good = "h\xC3\xA9llo \xE2\x82\xAC \xF0\x9D\x84\x9E";  // héllo € 𝄞
  check(sanitize_utf8(good) == good, "valid UTF-8 is kept");
  check(sanitize_utf8("a\xFF"
                      "b") == "a" + kFFFD + "b",
        "an invalid byte becomes U+FFFD");
  check(sanitize_utf8("\xC0\xAF") == kFFFD + kFFFD, "an overlong form is replaced");
  check(sanitize_utf8("\xED\xA0\x80") == kFFFD + kFFFD + kFFFD, "a surrogate is replaced");
  check(sanitize_utf8("x\xE2\x82") == "x" + kFFFD + kFFFD, "a cut-off sequence is replaced");
  check(sanitize_utf8("\x80") == kFFFD, "a lone continuation byte is replaced");
  check(utf8_incomplete_tail("a\xE2\x82") == 1, "E2 82 lacks one byte");
  check(utf8_incomplete_tail("a\xF0") == 3, "F0 lacks three bytes");
  check(utf8_incomplete_tail("abc") == 0, "ASCII is complete");
  check(utf8_incomplete_tail("\xE2\x82\xAC") == 0, "a whole euro sign is complete");
}

void test_checkpoint_path(const fs::path& tmp) {
  const fs::path ck = tmp / "new" / "sub" / "model.ckpt";
  prepare_checkpoint_path(ck.string());
  check(fs::is_directory(ck.parent_path()), "the checkpoint's folder is created at once");
  bool threw = false;
  try {
    prepare_checkpoint_path(tmp.string());
  } catch (const std::exception& e) {
    threw = std::string(e.what()).find("is a folder") != std::string::npos;
  }
  check(threw, "a folder as --checkpoint is an error naming it");
  std::ofstream(tmp / "plain_file") << "x";
  threw = false;
  try {
    prepare_checkpoint_path((tmp / "plain_file" / "model.ckpt").string());
  } catch (const std::exception& e) {
    threw = std::string(e.what()).find("--checkpoint") != std::string::npos;
  }
  check(threw, "a checkpoint under a plain file is an error at start");
  prepare_checkpoint_path("");  // no checkpoint: nothing to do
}

void test_progress_line(const fs::path& tmp) {
  const std::string path = (tmp / "stdout.txt").string();
  std::fflush(stdout);
  const int saved = dup(1);
  std::FILE* f = std::freopen(path.c_str(), "w", stdout);
  check(f != nullptr, "stdout redirected");
  ProgressLine line;
  line.show("step %d", 10);
  line.show("s%d", 2);
  line.end();
  line.end();  // nothing more: no line is showing
  line.show("abc");
  line.finish("done");
  std::fflush(stdout);
  dup2(saved, 1);
  close(saved);
  std::ifstream in(path);
  std::stringstream got;
  got << in.rdbuf();
  check(got.str() == "step 10\rs2     \nabc\rdone\n",
        "progress line output, got '" + got.str() + "'");
}

void test_help_format() {
  CLI::App app{"demo"};
  use_help_format(app);
  double lr = 0.1;
  bool augment = true, graphs = false;
  std::string name = "auto";
  app.add_option("--lr", lr, "learning rate");
  app.add_option("--device", name, "where to run");
  app.add_flag("!--no-augment", augment, "no random crops");
  app.add_flag("--graphs", graphs, "capture graphs");
  const std::string help = app.help();
  check(help.find("learning rate (default: 0.1)") != std::string::npos,
        "--help shows a default after the description:\n" + help);
  check(help.find("where to run (default: auto)") != std::string::npos,
        "--help shows a string default:\n" + help);
  check(help.find('{') == std::string::npos, "--help has no {false} marks:\n" + help);
  check(help.find("FLOAT=") == std::string::npos, "--help has no TYPE=default:\n" + help);
}
}  // namespace

int main() {
  const fs::path tmp =
      fs::temp_directory_path() / ("ember_examples_test_" + std::to_string(getpid()));
  fs::create_directories(tmp);
  test_utf8();
  test_checkpoint_path(tmp);
  test_progress_line(tmp);
  test_help_format();
  fs::remove_all(tmp);
  if (failures == 0) std::printf("examples/common: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
