// init_process_group and helpers shared by the backends.
#include "ember/distributed/process_group.h"

#include <cstdlib>
#include <string>

#include "ember/tensor/runtime/cuda_device.h"

namespace ember::distributed {

void ProcessGroup::check_tensor(const char* op, const Tensor& t, bool cuda,
                                bool elementwise) const {
  EMBER_CHECK(t.defined(), backend(), " ", op, ": undefined tensor");
  const bool dense =
      t.is_contiguous() || (elementwise && t.is_contiguous(MemoryFormat::channels_last));
  EMBER_CHECK(dense, backend(), " ", op, ": the tensor of shape ", t.shape_str(),
              " must be contiguous", elementwise ? " (or dense channels_last)" : "",
              "; call .contiguous() first");
  EMBER_CHECK(
      t.device().is_cuda() == cuda, backend(), " ", op, ": the ", backend(), " backend serves ",
      cuda ? "CUDA" : "CPU", " tensors, got one on ", t.device().str(),
      cuda ? "; use the MPI backend for CPU tensors" : "; use the NCCL backend for GPU tensors");
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  EMBER_CHECK(end && *end == '\0', "environment variable ", name, "='", v, "' is not an integer");
  return int(x);
}

std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& o) {
  std::string backend = o.backend;
  if (backend == "auto") backend = cuda::is_available() && nccl_available() ? "nccl" : "mpi";
  const int timeout_s = env_int("EMBER_DIST_TIMEOUT_S", 0);
  EMBER_CHECK(timeout_s >= 0, "EMBER_DIST_TIMEOUT_S=", timeout_s,
              " must be a positive number of seconds");
  const std::chrono::milliseconds timeout =
      timeout_s > 0 ? std::chrono::milliseconds(int64_t(timeout_s) * 1000) : o.timeout;
  if (backend == "mpi") {
    EMBER_CHECK_STATUS(mpi_available(), not_supported,
                       "init_process_group: the MPI backend is not "
                       "in this build (install libopenmpi-dev and rebuild)");
    return make_mpi_process_group(timeout);
  }
  EMBER_CHECK(backend == "nccl", "init_process_group: unknown backend '", backend,
              "'; use \"nccl\", \"mpi\" or \"auto\"");
  EMBER_CHECK_STATUS(nccl_available(), not_supported,
                     "init_process_group: the NCCL backend is not "
                     "in this build (Ember was built without CUDA or NCCL)");
  const int rank = o.rank >= 0 ? o.rank : env_int("RANK", env_int("OMPI_COMM_WORLD_RANK", 0));
  const int world =
      o.world_size >= 0 ? o.world_size : env_int("WORLD_SIZE", env_int("OMPI_COMM_WORLD_SIZE", 1));
  const int local = env_int("LOCAL_RANK", env_int("OMPI_COMM_WORLD_LOCAL_RANK", rank));
  EMBER_CHECK(world >= 1 && rank >= 0 && rank < world, "init_process_group: rank ", rank,
              " is not in [0, world_size ", world, "); check RANK and WORLD_SIZE");
  std::string addr = o.master_addr;
  if (addr.empty()) {
    const char* a = std::getenv("MASTER_ADDR");
    addr = a && *a ? a : "127.0.0.1";
  }
  const int port = o.master_port > 0 ? o.master_port : env_int("MASTER_PORT", 29500);
  return make_nccl_process_group(rank, world, local, addr, port, timeout);
}

}  // namespace ember::distributed
