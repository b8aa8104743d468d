// reduce_sum's warp and block sums: they live in kernels/common/wb_block_sum.cuh, shared with
// rmsnorm; the ladder's rungs use them by these names.
#pragma once

#include "wb_block_sum.cuh"

namespace reduce_sum {
using wb_reduce::block_sum;
using wb_reduce::warp_sum;
}  // namespace reduce_sum
