// The MPI backend for CPU tensors (OpenMPI from Debian): collectives on MPI_COMM_WORLD, blocking
// for the caller. It is what lets the data-parallel logic run in CI without GPUs (mpiexec -n 2, or
// ember-launch, which uses mpiexec on machines without GPUs).
// Faults: each collective is started non-blocking and waited for with a deadline (the group's
// timeout). While it waits, the peers on this host (and pid namespace) are checked every 100 ms
// (their pids were exchanged at start-up): a peer that has exited ends the wait at once. Either way the call
// throws execution_failed naming this rank, the collective and its sequence number, and the
// peers known to have exited; the group is then unusable (every later call throws the same
// error), as the communicator's state is unknown.
#include "ember/distributed/process_group.h"
#include "ember/ops/ops.h"

#ifdef EMBER_WITH_MPI
#define OMPI_SKIP_MPICXX 1  // the C API is all Ember uses
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <thread>
#endif

namespace ember::distributed {

#ifdef EMBER_WITH_MPI

namespace {

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  EMBER_THROW(execution_failed, "MPI: ", call, " failed: ", std::string(msg, size_t(len)));
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: case DType::boolean: return MPI_UINT8_T;
    default:
      EMBER_THROW(not_supported, "MPI backend: dtype ", dtype_name(t), " is not supported for "
                  "reductions on the CPU; convert to float32 first");
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: case ReduceOp::avg: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_SUM;
}

// Set when a collective failed: MPI_Finalize would then wait for the ranks that are gone or stuck,
// so the process exits without it (and mpiexec, seeing that, stops the job).
std::atomic<bool> g_group_broken{false};

void ensure_mpi_initialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
      std::atexit([] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized && !g_group_broken.load()) MPI_Finalize();
      });
    }
  });
}

// True when process `pid` of this host has exited (gone, or a zombie not yet reaped).
bool process_exited(int pid) {
  if (pid <= 0) return false;
  if (kill(pid_t(pid), 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t close = line.rfind(')');  // "pid (comm) S ...": the state follows the name
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

// Which processes' pids this process can check: the host name and the pid namespace (two
// containers may share a host name but not their pids).
std::string pid_domain() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  char ns[128] = {};
  const ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
  return std::string(name) + "/" + (n > 0 ? std::string(ns, size_t(n)) : std::string("?"));
}

class MpiProcessGroup : public ProcessGroup {
 public:
  MpiProcessGroup(int rank, int world, std::chrono::milliseconds timeout)
      : ProcessGroup(rank, world), timeout_(timeout), peer_pids_(size_t(world), 0) {
    // Every rank's pid, kept for the ranks whose pids this process sees (others stay 0: not
    // checked).
    const std::string host = pid_domain();
    constexpr int kHost = 128;
    std::vector<char> hosts(size_t(world) * kHost, 0);
    std::vector<int> pids(size_t(world), 0);
    int pid = int(getpid());
    char mine[kHost] = {};
    host.copy(mine, kHost - 1);
    check_mpi(MPI_Allgather(&pid, 1, MPI_INT, pids.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
    check_mpi(MPI_Allgather(mine, kHost, MPI_CHAR, hosts.data(), kHost, MPI_CHAR, MPI_COMM_WORLD),
              "MPI_Allgather");
    for (int r = 0; r < world; ++r)
      if (r != rank && std::string(&hosts[size_t(r) * kHost]) == std::string(mine))
        peer_pids_[size_t(r)] = pids[size_t(r)];
  }
  std::string backend() const override { return "mpi"; }

  void all_reduce(Tensor& t, ReduceOp op) override {
    check_tensor("all_reduce", t, false, /*elementwise=*/true);
    start("all_reduce", t);
    MPI_Request req;
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, t.data_ptr(), int(t.numel()), mpi_type(t.dtype()),
                             mpi_op(op), MPI_COMM_WORLD, &req), "MPI_Iallreduce");
    wait(req);
    if (op == ReduceOp::avg) {
      EMBER_CHECK(is_floating(t.dtype()), "all_reduce(avg) needs a floating tensor");
      mul_(t, 1.0 / world_size());
    }
    t.bump_version();
  }
  void broadcast(Tensor& t, int root) override {
    check_tensor("broadcast", t, false, /*elementwise=*/true);
    start("broadcast", t);
    MPI_Request req;
    check_mpi(MPI_Ibcast(t.data_ptr(), int(t.nbytes()), MPI_BYTE, root, MPI_COMM_WORLD, &req), "MPI_Ibcast");
    wait(req);
    t.bump_version();
  }
  void all_gather(Tensor& out, const Tensor& in) override {
    check_tensor("all_gather", out, false);
    check_tensor("all_gather", in, false);
    EMBER_CHECK(out.numel() == in.numel() * world_size() && out.dtype() == in.dtype(),
                "all_gather: output must hold world_size x input (", world_size(), " x ", in.numel(),
                " elements of ", dtype_name(in.dtype()), "), got ", out.numel());
    start("all_gather", in);
    MPI_Request req;
    check_mpi(MPI_Iallgather(in.data_ptr(), int(in.nbytes()), MPI_BYTE, out.data_ptr(),
                             int(in.nbytes()), MPI_BYTE, MPI_COMM_WORLD, &req), "MPI_Iallgather");
    wait(req);
  }
  void reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) override {
    check_tensor("reduce_scatter", out, false);
    check_tensor("reduce_scatter", in, false);
    EMBER_CHECK(in.numel() == out.numel() * world_size() && out.dtype() == in.dtype(),
                "reduce_scatter: input must hold world_size x output elements");
    start("reduce_scatter", in);
    MPI_Request req;
    check_mpi(MPI_Ireduce_scatter_block(in.data_ptr(), out.data_ptr(), int(out.numel()),
                                        mpi_type(in.dtype()), mpi_op(op), MPI_COMM_WORLD, &req),
              "MPI_Ireduce_scatter_block");
    wait(req);
    if (op == ReduceOp::avg) mul_(out, 1.0 / world_size());
  }
  void barrier() override {
    start("barrier", Tensor());
    MPI_Request req;
    check_mpi(MPI_Ibarrier(MPI_COMM_WORLD, &req), "MPI_Ibarrier");
    wait(req);
  }

 private:
  // Records the collective about to start (for the error of a failed wait); a broken group throws.
  void start(const char* op, const Tensor& t) {
    EMBER_CHECK_STATUS(broken_.empty(), execution_failed, broken_);
    ++sequence_;
    current_ = std::string(op) + " #" + std::to_string(sequence_);
    if (t.defined()) current_ += " (" + std::to_string(t.numel()) + " " + dtype_name(t.dtype()) + " elements)";
  }

  // Waits for `req`, polling; see the file comment.
  void wait(MPI_Request& req) {
    using clock = std::chrono::steady_clock;
    const auto begin = clock::now();
    auto next_check = begin + std::chrono::milliseconds(100);
    for (int spins = 0;; ++spins) {
      int done = 0;
      check_mpi(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (done) return;
      const auto now = clock::now();
      if (now >= next_check) {
        next_check = now + std::chrono::milliseconds(100);
        std::string dead;
        for (int r = 0; r < world_size(); ++r)
          if (process_exited(peer_pids_[size_t(r)]))
            dead += (dead.empty() ? "" : ", ") + std::to_string(r) + " (pid " +
                    std::to_string(peer_pids_[size_t(r)]) + ")";
        if (!dead.empty())
          fail("rank(s) " + dead + " exited while rank " + std::to_string(rank()) + " waited in " +
               current_);
        if (now - begin > timeout_)
          fail(current_ + " did not finish within " + std::to_string(timeout_.count()) +
               " ms on rank " + std::to_string(rank()) + " of " + std::to_string(world_size()) +
               ": another rank has died or stopped calling collectives (no peer on this host has "
               "exited)");
      }
      // Busy-polls as MPI's blocking calls do (MPI_Test is what moves a large message along), but
      // after the first spins lets other threads of this process run between polls.
      if (spins > 1000) std::this_thread::yield();
    }
  }

  [[noreturn]] void fail(const std::string& what) {
    g_group_broken.store(true);
    broken_ = "MPI backend: " + what + "; the process group is unusable (set the timeout with "
              "InitOptions::timeout or EMBER_DIST_TIMEOUT_S)";
    EMBER_THROW(execution_failed, broken_);
  }

  std::chrono::milliseconds timeout_;
  std::vector<int> peer_pids_;  // per rank: its pid when on this host, else 0
  uint64_t sequence_ = 0;
  std::string current_;
  std::string broken_;  // set once a collective failed
};

}  // namespace

bool mpi_available() { return true; }

std::shared_ptr<ProcessGroup> make_mpi_process_group(std::chrono::milliseconds timeout) {
  EMBER_CHECK(timeout.count() > 0, "make_mpi_process_group: the timeout must be positive, got ",
              timeout.count(), " ms");
  ensure_mpi_initialized();
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  // A launcher that asked for a world (WORLD_SIZE, RANK) which MPI did not form must not leave
  // each process training alone: a process not started by mpiexec sees a world of 1.
  const int want_world = env_int("WORLD_SIZE", world), want_rank = env_int("RANK", rank);
  EMBER_CHECK_STATUS(want_world == world && want_rank == rank, execution_failed,
                     "init_process_group (MPI): the environment says rank ", want_rank, " of ",
                     want_world, " (RANK, WORLD_SIZE) but MPI sees rank ", rank, " of ", world,
                     ": start the ranks with mpiexec -n ", want_world,
                     " (ember-launch does so on a machine without GPUs when mpiexec is installed)");
  return std::make_shared<MpiProcessGroup>(rank, world, timeout);
}

#else

bool mpi_available() { return false; }
std::shared_ptr<ProcessGroup> make_mpi_process_group(std::chrono::milliseconds) {
  EMBER_THROW(not_supported, "the MPI backend is not in this build (install libopenmpi-dev and rebuild)");
}

#endif

}  // namespace ember::distributed
