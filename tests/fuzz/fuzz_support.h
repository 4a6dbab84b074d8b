// Shared by the libFuzzer targets of tests/fuzz: a scratch folder for the bytes under test (the
// readers take paths), the rule that only ember::Error may leave a reader (anything else aborts,
// so libFuzzer records the input), and seed writing: EMBER_FUZZ_WRITE_SEEDS=<dir> makes a target
// write its seed corpus (files made by Ember itself) into <dir> and exit.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <typeinfo>

#include "ember/ember.h"

namespace ember_fuzz {

// Defined by each target: writes its seed files into `dir` (which exists).
void write_seeds(const std::string& dir);

// A folder of this process, removed at exit (in /dev/shm when there is one: no disk traffic).
inline const std::string& scratch_dir() {
  // Never destroyed: the exit handler that removes the folder reads it.
  static const std::string* dir = [] {
    std::string base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    if (const char* t = std::getenv("EMBER_FUZZ_TMPDIR")) base = t;
    std::string tmpl = base + "/ember-fuzz.XXXXXX";
    if (!mkdtemp(tmpl.data())) {
      std::perror("ember fuzz: mkdtemp");
      std::abort();
    }
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(scratch_dir(), ignored);
    });
    return new std::string(tmpl);
  }();
  return *dir;
}

// Writes `size` bytes to scratch_dir()/name and returns the path.
inline std::string write_file(const std::string& name, const uint8_t* data, size_t size) {
  std::string path = scratch_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  out.close();
  if (!out) {
    std::fprintf(stderr, "ember fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

inline void write_text(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

// Reads every byte of a CPU tensor (so that a tensor whose storage is smaller than its shape
// says shows up as an ASan report here rather than later) and returns a checksum.
inline uint64_t touch(const ember::Tensor& t) {
  if (!t.defined() || t.numel() == 0) return 0;
  ember::Tensor c = t.contiguous();
  const auto* p = static_cast<const uint8_t*>(c.data_ptr());
  uint64_t h = 0;
  for (size_t i = 0, n = size_t(c.nbytes()); i < n; ++i) h = h * 31 + p[i];
  return h;
}

// Runs `f`; an ember::Error is the expected outcome for a bad input. Any other exception escapes
// the public API, which is a bug: it is printed (to stdout, which scripts/fuzz.sh keeps open) and
// the process aborts, so libFuzzer saves the input.
template <typename F>
void expect_only_ember_errors(const char* what, F&& f) {
  try {
    f();
  } catch (const ember::Error&) {
  } catch (const std::exception& e) {
    std::printf("ember fuzz: %s threw a foreign exception (%s): %s\n", what, typeid(e).name(),
                e.what());
    std::fflush(stdout);
    std::abort();
  }
}

}  // namespace ember_fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("EMBER_FUZZ_WRITE_SEEDS")) {
    std::filesystem::create_directories(dir);
    ember_fuzz::write_seeds(dir);
    std::exit(0);
  }
  return 0;
}
