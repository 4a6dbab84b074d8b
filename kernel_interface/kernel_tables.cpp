// The kernel tables of kernel_interface/ (filled by registrations in cpu_kernels/ and
// cuda_kernels/).
#include "ember/kernel_interface/elementwise.h"
#include "ember/kernel_interface/gemm.h"
#include "ember/kernel_interface/indexing.h"
#include "ember/kernel_interface/random.h"
#include "ember/kernel_interface/reduce.h"

namespace ember {

EMBER_DEFINE_KERNEL(unary_kernel, UnaryKernel)
EMBER_DEFINE_KERNEL(binary_kernel, BinaryKernel)
EMBER_DEFINE_KERNEL(where_kernel, WhereKernel)
EMBER_DEFINE_KERNEL(copy_kernel, CopyKernel)
EMBER_DEFINE_KERNEL(reduce_kernel, ReduceKernel)
EMBER_DEFINE_KERNEL(gemm_kernel, GemmKernel)
EMBER_DEFINE_KERNEL(index_select_kernel, IndexSelectKernel)
EMBER_DEFINE_KERNEL(index_add_kernel, IndexAddKernel)
EMBER_DEFINE_KERNEL(gather_kernel, GatherKernel)
EMBER_DEFINE_KERNEL(scatter_add_kernel, ScatterAddKernel)
EMBER_DEFINE_KERNEL(random_kernel, RandomKernel)
EMBER_DEFINE_KERNEL(poisson_kernel, PoissonKernel)
EMBER_DEFINE_KERNEL(multinomial_kernel, MultinomialKernel)

bool binary_op_writes_bool(BinaryOp op) {
  switch (op) {
    case BinaryOp::eq:
    case BinaryOp::ne:
    case BinaryOp::lt:
    case BinaryOp::le:
    case BinaryOp::gt:
    case BinaryOp::ge:
    case BinaryOp::logical_and:
    case BinaryOp::logical_or:
    case BinaryOp::logical_xor:
      return true;
    default:
      return false;
  }
}

}  // namespace ember
