// The elementwise family's face: what its kernel files share.
#pragma once

namespace ember::cuda {

// Elements each thread of a strided kernel loads before computing any (memory-level parallelism:
// one scalar access per thread at a time cannot cover HBM latency).
constexpr int kStridedUnroll = 4;

}  // namespace ember::cuda
