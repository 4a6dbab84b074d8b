// The NCCL backend for CUDA tensors. Collectives run on the current stream of the tensor's device
// (capturable). A watchdog thread tracks each collective with an event; one that has not finished
// within the timeout (or an asynchronous NCCL error) aborts the communicator, so the job ends with
// an error naming the rank and the op instead of hanging; the next call into the group throws it.
// The watchdog also bounds the host side: an enqueue that blocks (NCCL connects to peers lazily,
// at a communicator's first collectives, and waits for a peer that died) is aborted the same way,
// and the call throws the watchdog's error rather than NCCL's.
#include "ember/distributed/process_group.h"
#include "ember/ops/ops.h"
#include "ember/tensor/runtime/cuda_device.h"

#ifdef EMBER_WITH_NCCL
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "ember/distributed/rendezvous.h"
#include "ember/tensor/runtime/cuda_check.h"
#include "ember/tensor/runtime/cuda_graph.h"
#endif

namespace ember::distributed {

#ifdef EMBER_WITH_NCCL

namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    case DType::u8:
    case DType::boolean:
      return ncclUint8;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  return ncclSum;
}

class NcclProcessGroup : public ProcessGroup {
 public:
  NcclProcessGroup(int rank, int world, int device, const std::string& addr, int port,
                   std::chrono::milliseconds timeout)
      : ProcessGroup(rank, world), device_(device), timeout_(timeout) {
    cuda::check_device(Device::cuda(device));
    DeviceGuard guard(Device::cuda(device));
    ncclUniqueId id;
    std::string blob;
    if (rank == 0) {
      EMBER_NCCL_CHECK(ncclGetUniqueId(&id));
      blob.assign(reinterpret_cast<const char*>(&id), sizeof(id));
    }
    blob = tcp_broadcast_blob(rank, world, addr, port, blob, timeout);
    EMBER_CHECK_STATUS(blob.size() == sizeof(id), execution_failed, "NCCL rendezvous: got ",
                       blob.size(), " bytes for the unique id, expected ", sizeof(id));
    std::memcpy(&id, blob.data(), sizeof(id));
    EMBER_NCCL_CHECK(ncclCommInitRank(&comm_, world, id, rank));
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclProcessGroup() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    for (auto& w : pending_) cudaEventDestroy(w.event);
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    if (comm_) ncclCommDestroy(comm_);
  }

  std::string backend() const override { return "nccl"; }

  void all_reduce(Tensor& t, ReduceOp op) override {
    check_tensor("all_reduce", t, true, /*elementwise=*/true);
    run("all_reduce", t.device(), [&](ncclComm_t comm, cudaStream_t s) {
      EMBER_NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()),
                                     nccl_type(t.dtype()), nccl_op(op), comm, s));
    });
    t.bump_version();
  }
  void broadcast(Tensor& t, int root) override {
    check_tensor("broadcast", t, true, /*elementwise=*/true);
    run("broadcast", t.device(), [&](ncclComm_t comm, cudaStream_t s) {
      EMBER_NCCL_CHECK(
          ncclBroadcast(t.data_ptr(), t.data_ptr(), t.nbytes(), ncclUint8, root, comm, s));
    });
    t.bump_version();
  }
  void all_gather(Tensor& out, const Tensor& in) override {
    check_tensor("all_gather", out, true);
    check_tensor("all_gather", in, true);
    EMBER_CHECK(out.numel() == in.numel() * world_size() && out.dtype() == in.dtype(),
                "all_gather: output must hold world_size x input elements");
    run("all_gather", in.device(), [&](ncclComm_t comm, cudaStream_t s) {
      EMBER_NCCL_CHECK(
          ncclAllGather(in.data_ptr(), out.data_ptr(), in.nbytes(), ncclUint8, comm, s));
    });
  }
  void reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) override {
    check_tensor("reduce_scatter", out, true);
    check_tensor("reduce_scatter", in, true);
    EMBER_CHECK(in.numel() == out.numel() * world_size() && out.dtype() == in.dtype(),
                "reduce_scatter: input must hold world_size x output elements");
    run("reduce_scatter", in.device(), [&](ncclComm_t comm, cudaStream_t s) {
      EMBER_NCCL_CHECK(ncclReduceScatter(in.data_ptr(), out.data_ptr(), size_t(out.numel()),
                                         nccl_type(in.dtype()), nccl_op(op), comm, s));
    });
  }
  void barrier() override {
    Tensor one = ones({1}, Device::cuda(device_));
    all_reduce(one, ReduceOp::sum);
    current_stream(Device::cuda(device_)).synchronize();
    throw_if_failed();
  }

 private:
  struct Work {
    cudaEvent_t event;
    const char* op;
    std::chrono::steady_clock::time_point start;
  };

  template <typename F>
  void run(const char* op, Device device, F enqueue) {
    EMBER_CHECK(device.index == device_, "NCCL ", op, ": the tensor is on ", device.str(),
                " but this process group uses cuda:", device_);
    DeviceGuard guard(device);
    cudaStream_t s = cudaStream_t(current_stream(device).handle);
    ncclComm_t comm;
    {
      // The communicator is read under the lock (the watchdog clears it when it aborts), and the
      // enqueue is timed by the watchdog like the collective itself.
      std::lock_guard<std::mutex> lock(mutex_);
      EMBER_CHECK_STATUS(error_.empty(), execution_failed, error_);
      comm = comm_;
      enqueue_op_ = op;
      enqueue_start_ = std::chrono::steady_clock::now();
    }
    try {
      enqueue(comm, s);
    } catch (const Error&) {
      std::lock_guard<std::mutex> lock(mutex_);
      enqueue_op_ = nullptr;
      EMBER_CHECK_STATUS(error_.empty(), execution_failed, error_);  // the abort's reason first
      throw;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      enqueue_op_ = nullptr;
      EMBER_CHECK_STATUS(error_.empty(), execution_failed, error_);
    }
    // Inside a graph capture there is nothing to watch now; replays are watched by their caller.
    if (cuda::current_stream_capturing(device)) return;
    cudaEvent_t e = take_event();
    EMBER_CUDA_CHECK(cudaEventRecord(e, s));
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back({e, op, std::chrono::steady_clock::now()});
    cv_.notify_all();
  }

  cudaEvent_t take_event() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_events_.empty()) {
      cudaEvent_t e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
    cudaEvent_t e;
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }

  void throw_if_failed() {
    std::lock_guard<std::mutex> lock(mutex_);
    EMBER_CHECK_STATUS(error_.empty(), execution_failed, error_);
  }

  void watch() {
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
      if (enqueue_op_ && comm_ && error_.empty() &&
          std::chrono::steady_clock::now() - enqueue_start_ > timeout_) {
        error_ = ::ember::detail::concat(
            "NCCL watchdog: rank ", rank(), " of ", world_size(), ": enqueueing ", enqueue_op_,
            " blocked for more than ", timeout_.count(),
            " ms; the communicator was aborted (a rank probably died or never joined)");
        ncclCommAbort(comm_);
        comm_ = nullptr;
      }
      while (!pending_.empty()) {
        Work& w = pending_.front();
        cudaError_t q = cudaEventQuery(w.event);
        if (q == cudaSuccess) {
          free_events_.push_back(w.event);
          pending_.pop_front();
          continue;
        }
        if (q != cudaErrorNotReady) (void)cudaGetLastError();
        if (std::chrono::steady_clock::now() - w.start > timeout_ && error_.empty()) {
          error_ = ::ember::detail::concat(
              "NCCL watchdog: rank ", rank(), " of ", world_size(), ": ", w.op,
              " did not finish within ", timeout_.count(),
              " ms; the communicator was aborted (a rank probably died or is stuck)");
          ncclCommAbort(comm_);
          comm_ = nullptr;
        }
        break;
      }
      if (comm_ && error_.empty()) {
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess) {
          error_ =
              ::ember::detail::concat("NCCL asynchronous error on rank ", rank(), ": ",
                                      ncclGetErrorString(async), "; the communicator was aborted");
          ncclCommAbort(comm_);
          comm_ = nullptr;
        }
      }
    }
  }

  int device_;
  std::chrono::milliseconds timeout_;
  ncclComm_t comm_ = nullptr;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Work> pending_;
  std::vector<cudaEvent_t> free_events_;
  std::string error_;
  const char* enqueue_op_ = nullptr;  // the collective being enqueued, while run() enqueues it
  std::chrono::steady_clock::time_point enqueue_start_;
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace

bool nccl_available() { return true; }

std::shared_ptr<ProcessGroup> make_nccl_process_group(int rank, int world, int local_rank,
                                                      const std::string& addr, int port,
                                                      std::chrono::milliseconds timeout) {
  return std::make_shared<NcclProcessGroup>(rank, world, local_rank, addr, port, timeout);
}

#else

bool nccl_available() { return false; }
std::shared_ptr<ProcessGroup> make_nccl_process_group(int, int, int, const std::string&, int,
                                                      std::chrono::milliseconds) {
  EMBER_THROW(not_supported,
              "the NCCL backend is not in this build (Ember was built without CUDA/NCCL)");
}

#endif

}  // namespace ember::distributed
