// Checkpoints in the safetensors format (https://github.com/huggingface/safetensors), so that
// PyTorch's safetensors.torch.load_file / save_file read and write the same files:
//   bytes [0, 8)          N, the header length, a little-endian uint64
//   bytes [8, 8 + N)      a JSON object: {"<name>": {"dtype": "F32", "shape": [..],
//                         "data_offsets": [begin, end]}, ..., "__metadata__": {"k": "v", ...}},
//                         padded with spaces so that the data starts 8-byte aligned
//   bytes [8 + N, end)    the tensors' bytes, row-major, little-endian, back to back; offsets are
//                         relative to this buffer and must cover it exactly
// dtypes: F32, F64, F16, BF16, I32, I64, U8, BOOL. Tensor names are Module::state_dict names, which
// are PyTorch's ("layer1.0.bn1.running_mean"), so a model's state loads into the same PyTorch
// model.
//
// Writes are atomic: the file is written to a temporary file in the same folder, fsynced, renamed
// over `path`, and the folder is fsynced; a failure or crash at any point leaves any previous file
// at `path` intact. Reads validate the whole header (lengths, JSON, dtypes, shapes, offsets against
// the file size) before returning anything and throw ember::Error naming the file, the byte offset
// and what is wrong.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ember/nn/module.h"

namespace ember::optim {
class Optimizer;    // nn/optim.h
class LRScheduler;  // nn/lr_scheduler.h
}  // namespace ember::optim

namespace ember::nn {

// A safetensors file's "__metadata__": string keys to string values.
using CheckpointMetadata = std::map<std::string, std::string>;

// What load_checkpoint returns: the tensors and the metadata of one file.
struct LoadedTensors {
  NamedTensors tensors;         // CPU tensors, in file (data offset) order
  CheckpointMetadata metadata;  // the "__metadata__" map (empty when absent)
};

// Writes `tensors` (any device, dtype among the eight above, any strides: each is copied to a
// contiguous CPU tensor first) and `metadata` to `path` atomically. Names must be unique and
// non-empty, and "__metadata__" is reserved. With `checksums`, the metadata entry "ember.crc32"
// holds the CRC-32 of every tensor's bytes (a JSON object: name -> 8 hex digits), which
// load_checkpoint verifies; other readers ignore it. The temporary file is named
// ".<name>.tmp.<pid>.<random token>", so a restarted process (same pid) never collides with one
// left by a killed write; each successful save removes such leftovers of the same target whose
// process is gone.
void save_checkpoint(const std::string& path, const NamedTensors& tensors,
                     const CheckpointMetadata& metadata = {}, bool checksums = true);
// Reads a safetensors file (written by Ember or by any safetensors writer). JSON nesting deeper
// than 64 levels and tensors over the element limit (kMaxNumel) are rejected; when the metadata
// holds "ember.crc32", each listed tensor's data is checked against it (a mismatch is an
// ember::Error naming the tensor) and the entry is not returned in `metadata`.
LoadedTensors load_checkpoint(const std::string& path);

// Shorthands: a module's state_dict to a file, and a file into a module (strict as in
// Module::load_state_dict). Loading validates the whole file before the module is touched.
void save_state_dict(const Module& module, const std::string& path,
                     const CheckpointMetadata& metadata = {});
void load_state_dict(Module& module, const std::string& path, bool strict = true);

// ---- training checkpoints ----------------------------------------------------------------------

// The Philox state of one device's default generator.
struct RngState {
  Device device;  // whose default generator
  // The generator's seed and its Philox offset (how far the counter stream has advanced).
  uint64_t seed = 0, offset = 0;  // offset: the Philox counter position
};
// The default generators of the CPU and of every visible GPU.
std::vector<RngState> capture_rng_state();
// Restores each entry into its device's default generator; entries for GPUs that are not visible
// now (a GPU run resumed on the CPU) are skipped.
void restore_rng_state(const std::vector<RngState>& states);

// Everything needed to resume training, in one safetensors file:
//   tensors   model state under its own names (so PyTorch's model.load_state_dict takes the file
//             after dropping the other entries), optimizer state as "optimizer.<name>" (e.g.
//             "optimizer.state.0.exp_avg") and GradScaler state as "grad_scaler.<name>";
//   metadata  "format": "pt", "ember.checkpoint": "1", "ember.step", "ember.rng" (JSON),
//             "ember.optimizer" and "ember.scheduler" (JSON text owned by the optimizer and the
//             scheduler), and the caller's `extra` entries (whose keys must not start "ember.").
// Typical use (optimizer and scheduler of nn/optim.h and nn/lr_scheduler.h):
//   nn::Checkpoint ck;
//   ck.model = model->state_dict();
//   ck.optimizer = opt.state_dict();  ck.optimizer_config = opt.config_json();
//   ck.scheduler = sched.state_json();  ck.step = step;  ck.rng = nn::capture_rng_state();
//   ck.save("run/last.safetensors");
//   ...
//   auto ck = nn::Checkpoint::load("run/last.safetensors");
//   ck.restore(*model, &opt, &sched);  step = ck.step;
struct Checkpoint {
  static constexpr const char* kOptimizerPrefix = "optimizer.";
  static constexpr const char* kGradScalerPrefix = "grad_scaler.";

  NamedTensors model;            // Module::state_dict()
  NamedTensors optimizer;        // optimizer tensor state, names without the prefix
  NamedTensors grad_scaler;      // GradScaler::state_dict(), names without the prefix
  std::string optimizer_config;  // the optimizer's non-tensor state (JSON text), may be empty
  std::string scheduler;         // the LR scheduler's state (JSON text), may be empty
  int64_t step = 0;              // training step (or iteration) the state belongs to
  std::vector<RngState> rng;     // usually capture_rng_state()
  CheckpointMetadata extra;      // anything else (epoch, data loader position, ...)

  // Writes the bundle to `path` atomically as one safetensors file (layout above), with checksums.
  void save(const std::string& path) const;
  // Model tensors are the entries without an "optimizer." or "grad_scaler." prefix.
  static Checkpoint load(const std::string& path);
  // Resumes from this bundle: the optimizer's state and config and the scheduler's state (each
  // when given), the model's state, then the RNG state. All or nothing: when any part is refused
  // (another model's checkpoint, partial optimizer state, a corrupt scheduler entry), the model,
  // optimizer and scheduler are left as they were. `strict` as in Module::load_state_dict and
  // Optimizer::load_state_dict; a missing scheduler state is an error unless it is false.
  void restore(Module& model, optim::Optimizer* optimizer = nullptr,
               optim::LRScheduler* scheduler = nullptr, bool strict = true) const;
};

namespace detail {
// Test hook: while alive, checkpoint writes on this thread fail (ember::Error) after writing
// `fail_after_bytes` bytes of the temporary file, as a full disk or a crash mid-write would.
class CheckpointWriteFault {
 public:
  explicit CheckpointWriteFault(int64_t fail_after_bytes);
  ~CheckpointWriteFault();
  CheckpointWriteFault(const CheckpointWriteFault&) = delete;
  CheckpointWriteFault& operator=(const CheckpointWriteFault&) = delete;

 private:
  int64_t prev_;
};
}  // namespace detail

}  // namespace ember::nn
