// A tiny data-parallel program for the ember-launch tests (tests/CMakeLists.txt, label
// distributed): joins the job through init_process_group (MPI backend) and runs all_reduce steps.
//   launch_probe sum     3 steps; each checks the sum of (rank + 1) over the world; exit 0 when
//   right launch_probe die     rank 1 exits with status 3 after step 1, mid-run launch_probe stall
//   rank 1 stops calling collectives after step 1 (sleeps)
// A collective that fails with an ember::Error is printed as "rank R: error: ..." and exits 1; a
// dead or stalled peer ends the process from the MPI backend's watchdog, which prints why.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "ember/ember.h"

using namespace ember;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "sum";
  distributed::InitOptions options;
  options.backend = "mpi";
  std::shared_ptr<distributed::ProcessGroup> group;
  try {
    group = distributed::init_process_group(options);
  } catch (const Error& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
  const int rank = group->rank(), world = group->world_size();
  const int want_world = distributed::env_int("WORLD_SIZE", -1);
  if (world < 2 || world != want_world) {
    std::printf("rank %d: a world of %d, expected WORLD_SIZE=%d (at least 2)\n", rank, world,
                want_world);
    return 1;
  }
  for (int step = 1; step <= 3; ++step) {
    if (step == 2 && rank == 1 && mode == "die") {
      std::printf("rank 1: exiting mid-run\n");
      std::fflush(stdout);
      _exit(3);
    }
    if (step == 2 && rank == 1 && mode == "stall")
      std::this_thread::sleep_for(std::chrono::minutes(2));
    Tensor t = full({5}, double(rank + 1));
    const auto start = std::chrono::steady_clock::now();
    try {
      group->all_reduce(t);
    } catch (const Error& e) {
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("rank %d: error after %.1f s: %s\n", rank, s, e.what());
      std::fflush(stdout);
      return 1;
    }
    const double expected = world * (world + 1) / 2.0;
    const double got = t.sum().item<double>() / 5;
    if (got != expected) {
      std::printf("rank %d: step %d: all_reduce sum %g, expected %g\n", rank, step, got, expected);
      return 1;
    }
    std::printf("rank %d of %d: step %d: all_reduce sum %g ok\n", rank, world, step, got);
  }
  return 0;
}
