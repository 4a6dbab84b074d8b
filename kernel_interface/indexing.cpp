// The kernel tables of the indexing kernels added beside the first four (those are defined in
// kernel_tables.cpp), filled by registrations in cpu_kernels/ and cuda_kernels/indexing/.
#include "ember/kernel_interface/indexing.h"

namespace ember {

EMBER_DEFINE_KERNEL(index_copy_kernel, IndexCopyKernel)
EMBER_DEFINE_KERNEL(scatter_reduce_kernel, ScatterReduceKernel)
EMBER_DEFINE_KERNEL(nonzero_flat_kernel, NonzeroFlatKernel)
EMBER_DEFINE_KERNEL(unravel_index_kernel, UnravelIndexKernel)
EMBER_DEFINE_KERNEL(advanced_gather_kernel, AdvancedGatherKernel)
EMBER_DEFINE_KERNEL(linear_index_kernel, LinearIndexKernel)

const char* scatter_reduce_name(ScatterReduce r) {
  switch (r) {
    case ScatterReduce::assign:
      return "assign";
    case ScatterReduce::sum:
      return "sum";
    case ScatterReduce::prod:
      return "prod";
    case ScatterReduce::amax:
      return "amax";
    case ScatterReduce::amin:
      return "amin";
  }
  return "?";
}

}  // namespace ember
