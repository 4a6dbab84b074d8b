// The MPI backend for CPU tensors (OpenMPI from Debian): blocking collectives on MPI_COMM_WORLD.
// It is what lets the data-parallel logic run in CI without GPUs (mpirun -np 2).
#include "ember/distributed/process_group.h"
#include "ember/ops/ops.h"

#ifdef EMBER_WITH_MPI
#define OMPI_SKIP_MPICXX 1  // the C API is all Ember uses
#include <mpi.h>

#include <cstdlib>
#include <mutex>
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
        if (!finalized) MPI_Finalize();
      });
    }
  });
}

class MpiProcessGroup : public ProcessGroup {
 public:
  MpiProcessGroup(int rank, int world) : ProcessGroup(rank, world) {}
  std::string backend() const override { return "mpi"; }

  void all_reduce(Tensor& t, ReduceOp op) override {
    check_tensor("all_reduce", t, false, /*elementwise=*/true);
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, t.data_ptr(), int(t.numel()), mpi_type(t.dtype()),
                            mpi_op(op), MPI_COMM_WORLD), "MPI_Allreduce");
    if (op == ReduceOp::avg) {
      EMBER_CHECK(is_floating(t.dtype()), "all_reduce(avg) needs a floating tensor");
      mul_(t, 1.0 / world_size());
    }
    t.bump_version();
  }
  void broadcast(Tensor& t, int root) override {
    check_tensor("broadcast", t, false, /*elementwise=*/true);
    check_mpi(MPI_Bcast(t.data_ptr(), int(t.nbytes()), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
    t.bump_version();
  }
  void all_gather(Tensor& out, const Tensor& in) override {
    check_tensor("all_gather", out, false);
    check_tensor("all_gather", in, false);
    EMBER_CHECK(out.numel() == in.numel() * world_size() && out.dtype() == in.dtype(),
                "all_gather: output must hold world_size x input (", world_size(), " x ", in.numel(),
                " elements of ", dtype_name(in.dtype()), "), got ", out.numel());
    check_mpi(MPI_Allgather(in.data_ptr(), int(in.nbytes()), MPI_BYTE, out.data_ptr(),
                            int(in.nbytes()), MPI_BYTE, MPI_COMM_WORLD), "MPI_Allgather");
  }
  void reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) override {
    check_tensor("reduce_scatter", out, false);
    check_tensor("reduce_scatter", in, false);
    EMBER_CHECK(in.numel() == out.numel() * world_size() && out.dtype() == in.dtype(),
                "reduce_scatter: input must hold world_size x output elements");
    check_mpi(MPI_Reduce_scatter_block(in.data_ptr(), out.data_ptr(), int(out.numel()),
                                       mpi_type(in.dtype()), mpi_op(op), MPI_COMM_WORLD),
              "MPI_Reduce_scatter_block");
    if (op == ReduceOp::avg) mul_(out, 1.0 / world_size());
  }
  void barrier() override { check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }
};

}  // namespace

bool mpi_available() { return true; }

std::shared_ptr<ProcessGroup> make_mpi_process_group() {
  ensure_mpi_initialized();
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  return std::make_shared<MpiProcessGroup>(rank, world);
}

#else

bool mpi_available() { return false; }
std::shared_ptr<ProcessGroup> make_mpi_process_group() {
  EMBER_THROW(not_supported, "the MPI backend is not in this build (install libopenmpi-dev and rebuild)");
}

#endif

}  // namespace ember::distributed
