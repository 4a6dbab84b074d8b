// Eager replay: an op that issues many small launches per call (the rnn op's per-step loops) runs
// them from a CUDA graph when it is called again, eagerly, on exactly the same problem. Run
// eagerly, such an op is bound by the host's launch rate (a few microseconds per cuBLAS call and
// kernel); one graph launch issues the same work for a fraction of that.
//
// The caller builds a key that holds everything its launches depend on by value: sizes, dtypes,
// the algorithm, and every device pointer it reads or writes (temporaries included, so it must
// allocate them before calling eager_replay). A key is captured the second time it is seen among
// the thread's recent keys, so a shape seen once costs no capture; from then on, while the caching
// allocator hands the op the same buffers (steady-state training does), each call is one graph
// launch. Work is captured on a private stream of this thread (the op's side streams fork from it
// and join back, as they do from the caller's stream); the graph is launched on the caller's
// current stream. Each thread keeps up to 8 keys with their graphs (least recently used evicted).
// Not used, and the launches run directly, when the caller's stream is being captured (they join
// that graph), when disabled (set_eager_replay(false) or EMBER_EAGER_REPLAY=0 in the
// environment), or for a key whose capture failed. EMBER_LOG_GRAPHS=1 logs captures, failures and
// evictions.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "ember/tensor/device.h"

namespace ember::cuda {

// Runs `launch` (work queued on the current stream of `device`, which it may fork to side streams
// that join back before it returns) directly, or from the graph cached for `key`.
void eager_replay(Device device, const std::vector<uint64_t>& key,
                  const std::function<void()>& launch);

void set_eager_replay(
    bool enabled);  // for every thread; the default is on unless EMBER_EAGER_REPLAY=0
bool eager_replay_enabled();

// How many keys this thread has recorded (first sightings) or captured (or failed to) so far: a
// call that changes it paid one-time host work. The algorithm cache's benchmark runs a candidate
// again, untimed, until it stops changing, so that the timed runs replay as the op does in steady
// state.
int64_t eager_replay_setup_events();

// Destroys this thread's cached graphs and forgets the keys it has seen.
void clear_eager_replay();

// Counts over this process, for tests and logs.
struct EagerReplayStats {
  int64_t direct = 0;    // calls that ran their launches directly
  int64_t captures = 0;  // graphs captured
  int64_t replays = 0;   // calls served by one graph launch
  int64_t failures = 0;  // captures that failed (the key then always runs directly)
};
EagerReplayStats eager_replay_stats();

}  // namespace ember::cuda
