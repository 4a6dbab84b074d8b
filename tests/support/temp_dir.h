// TempDir: a fresh folder under the system temp dir for one test, removed when it goes out of
// scope; shared by the tests that write files (checkpoints, data sets, malformed inputs).
#pragma once
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

namespace ember::test {

struct TempDir {
  std::filesystem::path path;
  // `prefix` names the folder after the suite, so a leftover says who left it.
  explicit TempDir(const std::string& prefix = "ember_test") {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // The path of `name` inside the folder (not created).
  std::string file(const std::string& name) const { return (path / name).string(); }
  // Writes `bytes` to `name` inside the folder and returns its path.
  std::string write(const std::string& name, const std::string& bytes) const {
    const std::string p = file(name);
    std::ofstream(p, std::ios::binary | std::ios::trunc)
        .write(bytes.data(), std::streamsize(bytes.size()));
    return p;
  }
  // The names of the files in the folder, sorted.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (auto& e : std::filesystem::directory_iterator(path))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

}  // namespace ember::test
