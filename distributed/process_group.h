// ProcessGroup: collectives across the processes of a job, one process per GPU. The NCCL backend
// serves CUDA tensors (collectives are enqueued on the current stream of the tensor's device, so
// they order with the surrounding work and can be captured in a CUDA graph); the MPI backend serves
// CPU tensors (blocking). init_process_group() reads the job from the environment: RANK,
// WORLD_SIZE, LOCAL_RANK and MASTER_ADDR/MASTER_PORT (set by ember-launch or by hand), or from MPI
// (mpirun / srun) when those are absent and Ember was built with MPI.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ember/tensor/tensor.h"

namespace ember::distributed {

// How a collective combines the ranks' values elementwise (torch.distributed.ReduceOp): sum, avg
// (the sum divided by the world size), max or min.
enum class ReduceOp { sum, avg, max, min };

// The processes of a job and the collectives among them (torch.distributed's ProcessGroup). Every
// rank must call the same collectives in the same order with tensors of the same shape and dtype.
// Get one from init_process_group(); NCCL groups take CUDA tensors, MPI groups CPU tensors, and a
// tensor of the wrong device, an undefined or a non-dense one throws bad_param.
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  // This process's index in the group, in [0, world_size()).
  int rank() const { return rank_; }
  // The number of processes in the group.
  int world_size() const { return world_size_; }
  // The backend's name: "nccl" or "mpi".
  virtual std::string backend() const = 0;

  // In place on `t` (dense). avg divides by the world size.
  virtual void all_reduce(Tensor& t, ReduceOp op = ReduceOp::sum) = 0;
  // In place on `t` (dense): every rank gets rank `root`'s values.
  virtual void broadcast(Tensor& t, int root = 0) = 0;
  // output: [world_size * input.numel()] (dense), rank r's input lands at r * input.numel().
  virtual void all_gather(Tensor& output, const Tensor& input) = 0;
  // input: [world_size * output.numel()]; rank r gets the reduction of chunk r.
  virtual void reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::sum) = 0;
  // Returns once every rank has called it (NCCL: a one-element all_reduce, then a host wait on
  // the current stream).
  virtual void barrier() = 0;

 protected:
  // For backends: this process is `rank` of `world_size`.
  ProcessGroup(int rank, int world_size) : rank_(rank), world_size_(world_size) {}
  // Undefined, wrong-device or non-dense tensors are errors. An elementwise collective (all_reduce,
  // broadcast) works on the tensor's memory as it lies, so channels_last is accepted there too;
  // the others need the contiguous order.
  void check_tensor(const char* op, const Tensor& t, bool cuda, bool elementwise = false) const;

 private:
  int rank_, world_size_;
};

// How init_process_group finds the job; every field defaults to the environment.
struct InitOptions {
  std::string backend = "auto";  // "nccl", "mpi", or "auto" (nccl when a GPU is visible)
  int rank = -1;                 // -1: from the environment (RANK, or MPI)
  int world_size = -1;           // -1: from the environment (WORLD_SIZE, or MPI)
  std::string master_addr;       // "": MASTER_ADDR or 127.0.0.1
  int master_port = -1;          // -1: MASTER_PORT or 29500
  // A collective that has not finished after this long fails, naming the rank and the op: NCCL
  // aborts the communicator and the next call into the group throws; MPI prints the error and
  // ends the process, so mpiexec stops the job (sooner when a peer on this host has exited; see
  // mpi_process_group.cpp). EMBER_DIST_TIMEOUT_S (seconds), when set, overrides it (and the
  // rendezvous' wait).
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
};

// Creates the group of this process (NCCL: binds to cuda:LOCAL_RANK).
std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options = {});

// The environment variable `name` as an int, or `fallback` when unset; malformed -> bad_param.
int env_int(const char* name, int fallback);

// Which backends this build has.
bool nccl_available();
bool mpi_available();

// Backend constructors (used by init_process_group; public for tests).
std::shared_ptr<ProcessGroup> make_mpi_process_group(
    std::chrono::milliseconds timeout = std::chrono::minutes(10));
std::shared_ptr<ProcessGroup> make_nccl_process_group(int rank, int world_size, int local_rank,
                                                      const std::string& master_addr,
                                                      int master_port,
                                                      std::chrono::milliseconds timeout);

}  // namespace ember::distributed
