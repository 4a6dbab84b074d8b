// ember-launch: starts one process per GPU on this node for data-parallel training, e.g.
//   ember-launch --nproc 8 ./build/examples/resnet --epochs 10
// Each child gets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (what
// distributed::init_process_group reads). SIGINT/SIGTERM are forwarded to every child. When one
// rank fails, the others are stopped (SIGTERM, then SIGKILL after a grace period) and the launcher
// exits with the failing rank's status, naming it.
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

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
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ember-launch: run one process per GPU for data-parallel training"};
  int nproc = 1, port = 29500, grace_s = 10, node_rank = 0, nnodes = 1;
  std::string addr = "127.0.0.1";
  std::vector<std::string> command;
  app.add_option("--nproc", nproc, "processes (GPUs) on this node")->check(CLI::Range(1, 1024));
  app.add_option("--nnodes", nnodes, "nodes in the job")->check(CLI::Range(1, 100000));
  app.add_option("--node-rank", node_rank, "this node's index")->check(CLI::NonNegativeNumber);
  app.add_option("--master-addr", addr, "address of rank 0");
  app.add_option("--master-port", port, "port of rank 0's rendezvous")->check(CLI::Range(1, 65535));
  app.add_option("--grace", grace_s, "seconds between SIGTERM and SIGKILL when stopping ranks");
  app.footer("After the launcher's options: the program and its arguments, passed on in order.");
  // The program is the first positional argument: it and everything after it stay unparsed, in
  // order (a positional option here would take the program's values and leave its flags behind).
  app.prefix_command();
  CLI11_PARSE(app, argc, argv);
  if (node_rank >= nnodes) {
    std::fprintf(stderr, "ember-launch: --node-rank %d must be below --nnodes %d\n", node_rank, nnodes);
    return 2;
  }
  command = app.remaining();
  if (command.empty()) {
    std::fprintf(stderr, "ember-launch: no program given (ember-launch --nproc N PROGRAM [ARGS...])\n");
    return 2;
  }

  const int world = nproc * nnodes;
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
      std::fprintf(stderr, "ember-launch: rank %d (local %d, pid %d) %s %d; stopping the other %d rank(s)\n",
                   node_rank * nproc + local, local, int(pid),
                   WIFEXITED(status) ? "exited with status" : "was killed by signal",
                   WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), remaining);
      stop_all(g_children, grace_s);
      remaining = 0;
    }
  }
  return g_signal ? 128 + int(g_signal) : exit_code;
}
