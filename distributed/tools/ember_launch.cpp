// ember-launch: starts one process per GPU on this node for data-parallel training, e.g.
//   ember-launch --nproc 8 ./build/examples/resnet --epochs 10
// Each child gets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (what
// distributed::init_process_group reads). SIGINT/SIGTERM are forwarded to every child. When one
// rank fails, the others are stopped (SIGTERM, then SIGKILL after a grace period) and the launcher
// exits with the failing rank's status, naming it.
// On a machine without GPUs the ranks talk through MPI, whose world only mpiexec can form: there
// (--backend auto, one node, mpiexec on the PATH or in EMBER_MPIEXEC) the launcher becomes
// `mpiexec -n N ember-launch PROGRAM...`; each of those copies sets RANK, LOCAL_RANK, WORLD_SIZE
// from MPI's environment and runs the program. When a rank fails, its copy names it and, after a
// short grace period in which the ranks waiting for it in a collective report that (the MPI
// backend watches its peers), exits with its status, and mpiexec stops the job.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include "common/cli_help.h"  // examples/common: the --help layout shared with the examples

namespace {
std::vector<pid_t> g_children;
volatile sig_atomic_t g_signal = 0;

void forward_signal(int sig) {
  g_signal = sig;
  for (pid_t c : g_children)
    if (c > 0) kill(c, sig);
}

void stop_all(std::vector<pid_t>& alive, int grace_s) {
  for (pid_t c : alive)
    if (c > 0) kill(c, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(grace_s);
  for (pid_t& c : alive) {
    while (c > 0) {
      int status = 0;
      pid_t r = waitpid(c, &status, WNOHANG);
      if (r == c || r < 0) {
        c = -1;
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        kill(c, SIGKILL);
        waitpid(c, &status, 0);
        c = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}
// A visible NVIDIA GPU: a device node, unless CUDA_VISIBLE_DEVICES hides every device.
bool gpu_visible() {
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) {
    const std::string s = v;
    if (s.empty() || s == "-1" || s == "none" || s == "NoDevFiles") return false;
  }
  for (int i = 0; i < 64; ++i)
    if (access(("/dev/nvidia" + std::to_string(i)).c_str(), F_OK) == 0) return true;
  return false;
}

// The mpiexec to use: EMBER_MPIEXEC, else mpiexec on the PATH; "" when there is none.
std::string find_mpiexec() {
  if (const char* e = std::getenv("EMBER_MPIEXEC"); e && *e) return e;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string candidate = dirs.substr(start, end - start) + "/mpiexec";
    if (end > start && access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

// Inside mpiexec (see the file comment): the launcher's variables from MPI's, then the program as
// a child. When the program fails, the others get kFaultGraceS seconds to notice (the MPI backend
// sees the exited peer and names it and the collective it waited in) before this process exits
// with the program's status and mpiexec stops the job.
constexpr int kFaultGraceS = 3;

int run_as_mpi_rank(char** program) {
  unsetenv("EMBER_LAUNCH_UNDER_MPI");
  auto copy = [](const char* to, std::initializer_list<const char*> from) {
    for (const char* f : from)
      if (const char* v = std::getenv(f)) {
        setenv(to, v, 1);
        return;
      }
  };
  copy("RANK", {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"});
  copy("WORLD_SIZE", {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"});
  copy("LOCAL_RANK", {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"});
  copy("LOCAL_WORLD_SIZE", {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"});
  struct sigaction sa {};
  sa.sa_handler = forward_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  g_children.assign(1, -1);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("ember-launch: fork");
    return 1;
  }
  if (pid == 0) {
    // mpiexec stops the job by signalling this process, SIGKILL last: the program must not
    // outlive it (an orphan would hold the job's output open and keep running).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(128 + SIGKILL);  // it died before prctl
    execvp(program[0], program);
    std::fprintf(stderr, "ember-launch: cannot run '%s': %s\n", program[0], std::strerror(errno));
    _exit(127);
  }
  g_children[0] = pid;
  int status = 0;
  // Waits for the program; once a stop signal was forwarded, it has 2 s before SIGKILL.
  std::chrono::steady_clock::time_point stop_deadline{};
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) break;
    if (g_signal) {
      const auto now = std::chrono::steady_clock::now();
      if (stop_deadline == std::chrono::steady_clock::time_point{}) {
        stop_deadline = now + std::chrono::seconds(2);
      } else if (now > stop_deadline) {
        kill(pid, SIGKILL);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  g_children[0] = -1;
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code != 0 && !g_signal) {
    std::fprintf(stderr, "ember-launch: rank %s (pid %d) %s %d; stopping the job in %d s\n",
                 std::getenv("RANK") ? std::getenv("RANK") : "?", int(pid),
                 WIFEXITED(status) ? "exited with status" : "was killed by signal",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), kFaultGraceS);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(kFaultGraceS);
    while (!g_signal && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return code;
}
}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("EMBER_LAUNCH_UNDER_MPI") && argc > 1) return run_as_mpi_rank(argv + 1);

  CLI::App app{"ember-launch: run one process per GPU for data-parallel training"};
  ember::examples::use_help_format(app);
  int nproc = 1, port = 29500, grace_s = 10, node_rank = 0, nnodes = 1;
  std::string addr = "127.0.0.1";
  std::vector<std::string> command;
  app.add_option("--nproc", nproc, "processes (GPUs) on this node")->check(CLI::Range(1, 1024));
  app.add_option("--nnodes", nnodes, "nodes in the job")->check(CLI::Range(1, 100000));
  app.add_option("--node-rank", node_rank, "this node's index")->check(CLI::NonNegativeNumber);
  app.add_option("--master-addr", addr, "address of rank 0");
  app.add_option("--master-port", port, "port of rank 0's rendezvous")->check(CLI::Range(1, 65535));
  app.add_option("--grace", grace_s, "seconds between SIGTERM and SIGKILL when stopping ranks")
      ->check(CLI::NonNegativeNumber);
  std::string backend = "auto";
  app.add_option("--backend", backend,
                 "how ranks are started: fork (one child each), mpi (through mpiexec, which forms "
                 "the MPI world CPU-only jobs need), auto (mpi when no GPU is visible, one node, "
                 "and mpiexec is found; else fork)")
      ->check(CLI::IsMember({"auto", "fork", "mpi"}));
  app.footer("After the launcher's options: the program and its arguments, passed on in order.");
  // The program is the first positional argument: it and everything after it stay unparsed, in
  // order (a positional option here would take the program's values and leave its flags behind).
  app.prefix_command();
  CLI11_PARSE(app, argc, argv);
  if (node_rank >= nnodes) {
    std::fprintf(stderr, "ember-launch: --node-rank %d must be below --nnodes %d\n", node_rank,
                 nnodes);
    return 2;
  }
  command = app.remaining();
  if (command.empty()) {
    std::fprintf(stderr,
                 "ember-launch: no program given (ember-launch --nproc N PROGRAM [ARGS...])\n");
    return 2;
  }

  const int world = nproc * nnodes;
  const std::string mpiexec = backend == "fork" ? "" : find_mpiexec();
  if (backend == "mpi" && mpiexec.empty()) {
    std::fprintf(stderr,
                 "ember-launch: --backend mpi: no mpiexec on the PATH (install openmpi-bin "
                 "or set EMBER_MPIEXEC)\n");
    return 2;
  }
  if (backend == "mpi" && nnodes > 1) {
    std::fprintf(stderr,
                 "ember-launch: --backend mpi starts one node; for several, run mpiexec "
                 "with a host file yourself\n");
    return 2;
  }
  if (backend == "mpi" ||
      (backend == "auto" && nnodes == 1 && world > 1 && !mpiexec.empty() && !gpu_visible())) {
    // Through mpiexec: this program again under it, see the file comment.
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) {
      std::perror("ember-launch: readlink /proc/self/exe");
      return 1;
    }
    self[n] = '\0';
    setenv("EMBER_LAUNCH_UNDER_MPI", "1", 1);
    setenv("MASTER_ADDR", addr.c_str(), 1);
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);  // more ranks than cores is allowed
    std::vector<std::string> full = {mpiexec, "-n", std::to_string(nproc), self};
    full.insert(full.end(), command.begin(), command.end());
    std::vector<char*> args;
    for (std::string& a : full) args.push_back(a.data());
    args.push_back(nullptr);
    std::fprintf(stderr, "ember-launch: no GPU visible: starting %d ranks with %s\n", nproc,
                 mpiexec.c_str());
    execv(args[0], args.data());
    std::fprintf(stderr, "ember-launch: cannot run '%s': %s\n", args[0], std::strerror(errno));
    return 127;
  }
  struct sigaction sa {};
  sa.sa_handler = forward_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  g_children.assign(size_t(nproc), -1);
  for (int local = 0; local < nproc; ++local) {
    const int rank = node_rank * nproc + local;
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("ember-launch: fork");
      stop_all(g_children, grace_s);
      return 1;
    }
    if (pid == 0) {
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("MASTER_ADDR", addr.c_str(), 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      setenv("NCCL_NVLS_ENABLE", "0", 0);  // multicast stays off unless the user says otherwise
      std::vector<char*> args;
      for (std::string& a : command) args.push_back(a.data());
      args.push_back(nullptr);
      execvp(args[0], args.data());
      std::fprintf(stderr, "ember-launch: cannot run '%s': %s\n", args[0], std::strerror(errno));
      _exit(127);
    }
    g_children[size_t(local)] = pid;
  }

  int remaining = nproc, exit_code = 0;
  while (remaining > 0) {
    int status = 0;
    pid_t pid = wait(&status);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    int local = -1;
    for (int i = 0; i < nproc; ++i)
      if (g_children[size_t(i)] == pid) local = i;
    if (local < 0) continue;
    g_children[size_t(local)] = -1;
    --remaining;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0 && exit_code == 0) {
      exit_code = code;
      std::fprintf(
          stderr, "ember-launch: rank %d (local %d, pid %d) %s %d; stopping the other %d rank(s)\n",
          node_rank * nproc + local, local, int(pid),
          WIFEXITED(status) ? "exited with status" : "was killed by signal",
          WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), remaining);
      stop_all(g_children, grace_s);
      remaining = 0;
    }
  }
  return g_signal ? 128 + int(g_signal) : exit_code;
}
