// The MPI backend for CPU tensors (OpenMPI from Debian): blocking collectives on MPI_COMM_WORLD.
// It is what lets the data-parallel logic run in CI without GPUs (mpiexec -n 2, or ember-launch,
// which uses mpiexec on machines without GPUs).
// Faults: a watchdog thread watches the collective in progress. When a peer on this host (and pid
// namespace; their pids are exchanged at start-up) has exited while this rank waits, or the
// collective has not finished within the group's timeout, it prints an error naming this rank,
// the collective, its sequence number and the exited peers, and ends the process (status 1,
// without MPI_Finalize, which would wait for the missing rank); mpiexec then stops the job. A
// blocked MPI call cannot be interrupted to throw instead, and the non-blocking collectives that
// could be polled are several times slower than the blocking ones.
#include "ember/distributed/process_group.h"
#include "ember/ops/ops.h"

#ifdef EMBER_WITH_MPI
#define OMPI_SKIP_MPICXX 1  // the C API is all Ember uses
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
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
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::u8:
    case DType::boolean:
      return MPI_UINT8_T;
    default:
      EMBER_THROW(not_supported, "MPI backend: dtype ", dtype_name(t),
                  " is not supported for "
                  "reductions on the CPU; convert to float32 first");
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return MPI_SUM;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::min:
      return MPI_MIN;
  }
  return MPI_SUM;
}

void ensure_mpi_initialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided),
                "MPI_Init_thread");
      std::atexit([] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
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
    check_mpi(MPI_Allgather(&pid, 1, MPI_INT, pids.data(), 1, MPI_INT, MPI_COMM_WORLD),
              "MPI_Allgather");
    check_mpi(MPI_Allgather(mine, kHost, MPI_CHAR, hosts.data(), kHost, MPI_CHAR, MPI_COMM_WORLD),
              "MPI_Allgather");
    for (int r = 0; r < world; ++r)
      if (r != rank && std::string(&hosts[size_t(r) * kHost]) == std::string(mine))
        peer_pids_[size_t(r)] = pids[size_t(r)];
    watchdog_ = std::thread([this] { watch(); });
  }
  ~MpiProcessGroup() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
  }
  std::string backend() const override { return "mpi"; }

  void all_reduce(Tensor& t, ReduceOp op) override {
    check_tensor("all_reduce", t, false, /*elementwise=*/true);
    {
      Watched w(*this, "all_reduce", t);
      check_mpi(MPI_Allreduce(MPI_IN_PLACE, t.data_ptr(), int(t.numel()), mpi_type(t.dtype()),
                              mpi_op(op), MPI_COMM_WORLD),
                "MPI_Allreduce");
    }
    if (op == ReduceOp::avg) {
      EMBER_CHECK(is_floating(t.dtype()), "all_reduce(avg) needs a floating tensor");
      mul_(t, 1.0 / world_size());
    }
    t.bump_version();
  }
  void broadcast(Tensor& t, int root) override {
    check_tensor("broadcast", t, false, /*elementwise=*/true);
    {
      Watched w(*this, "broadcast", t);
      check_mpi(MPI_Bcast(t.data_ptr(), int(t.nbytes()), MPI_BYTE, root, MPI_COMM_WORLD),
                "MPI_Bcast");
    }
    t.bump_version();
  }
  void all_gather(Tensor& out, const Tensor& in) override {
    check_tensor("all_gather", out, false);
    check_tensor("all_gather", in, false);
    EMBER_CHECK(out.numel() == in.numel() * world_size() && out.dtype() == in.dtype(),
                "all_gather: output must hold world_size x input (", world_size(), " x ",
                in.numel(), " elements of ", dtype_name(in.dtype()), "), got ", out.numel());
    Watched w(*this, "all_gather", in);
    check_mpi(MPI_Allgather(in.data_ptr(), int(in.nbytes()), MPI_BYTE, out.data_ptr(),
                            int(in.nbytes()), MPI_BYTE, MPI_COMM_WORLD),
              "MPI_Allgather");
  }
  void reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) override {
    check_tensor("reduce_scatter", out, false);
    check_tensor("reduce_scatter", in, false);
    EMBER_CHECK(in.numel() == out.numel() * world_size() && out.dtype() == in.dtype(),
                "reduce_scatter: input must hold world_size x output elements");
    {
      Watched w(*this, "reduce_scatter", in);
      check_mpi(MPI_Reduce_scatter_block(in.data_ptr(), out.data_ptr(), int(out.numel()),
                                         mpi_type(in.dtype()), mpi_op(op), MPI_COMM_WORLD),
                "MPI_Reduce_scatter_block");
    }
    if (op == ReduceOp::avg) mul_(out, 1.0 / world_size());
  }
  void barrier() override {
    Watched w(*this, "barrier", Tensor());
    check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  }

 private:
  // RAII: the collective in progress, for the watchdog (two uncontended lock/unlock pairs).
  struct Watched {
    Watched(MpiProcessGroup& g, const char* op, const Tensor& t) : g_(g) {
      std::lock_guard<std::mutex> lock(g_.mutex_);
      g_.op_ = op;
      ++g_.sequence_;
      g_.numel_ = t.defined() ? t.numel() : -1;
      g_.dtype_ = t.defined() ? t.dtype() : DType::f32;
      g_.start_ = std::chrono::steady_clock::now();
    }
    ~Watched() {
      std::lock_guard<std::mutex> lock(g_.mutex_);
      g_.op_ = nullptr;
    }
    MpiProcessGroup& g_;
  };

  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
      if (stop_ || !op_) continue;
      const auto waited = std::chrono::steady_clock::now() - start_;
      std::string dead;
      for (int r = 0; r < world_size(); ++r)
        if (process_exited(peer_pids_[size_t(r)]))
          dead += (dead.empty() ? "" : ", ") + std::to_string(r) + " (pid " +
                  std::to_string(peer_pids_[size_t(r)]) + ")";
      if (dead.empty() && waited <= timeout_) continue;
      std::string what = std::string(op_) + " #" + std::to_string(sequence_);
      if (numel_ >= 0)
        what += " (" + std::to_string(numel_) + " " + dtype_name(dtype_) + " elements)";
      char seconds[32];
      std::snprintf(seconds, sizeof(seconds), "%.1f",
                    std::chrono::duration<double>(waited).count());
      const std::string message =
          "[ember] MPI backend: rank " + std::to_string(rank()) + " of " +
          std::to_string(world_size()) + ": " +
          (dead.empty() ? what + " did not finish within " + std::to_string(timeout_.count()) +
                              " ms (waited " + seconds +
                              " s): another rank has died or stopped "
                              "calling collectives (no peer on this host has exited)"
                        : "rank(s) " + dead + " exited while this rank waited " + seconds +
                              " s in " + what) +
          "; ending this process (set the timeout with InitOptions::timeout or "
          "EMBER_DIST_TIMEOUT_S)\n";
      std::fputs(message.c_str(), stderr);
      std::fflush(stderr);
      std::fflush(stdout);
      _exit(1);  // not exit(): MPI_Finalize (at exit) would wait for the missing rank
    }
  }

  std::chrono::milliseconds timeout_;
  std::vector<int> peer_pids_;  // per rank: its pid when this process can see it, else 0
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  // The collective in progress (op_ null: none), guarded by mutex_.
  const char* op_ = nullptr;
  uint64_t sequence_ = 0;
  int64_t numel_ = -1;
  DType dtype_ = DType::f32;
  std::chrono::steady_clock::time_point start_;
  std::thread watchdog_;
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
  EMBER_THROW(not_supported,
              "the MPI backend is not in this build (install libopenmpi-dev and rebuild)");
}

#endif

}  // namespace ember::distributed
