// Packing strided float32 views (transposed or sliced activations) into contiguous
// temporaries inside a primitive, instead of a Contiguous node in the graph.
#pragma once

#include <cstdint>
#include <vector>

#include "mlx/array.h"
#include "mlx/backend/cpu/encoder.h"

namespace vmlx {

// dst[i] = src at the i-th index of `shape` (row-major) under element `strides`.
void gather_strided(
    const float* src,
    const std::vector<int64_t>& shape,
    const std::vector<int64_t>& strides,
    float* dst);

// `a` itself when row-contiguous; else a new contiguous array the encoder fills (a copy
// task queued before the caller's) and keeps alive until the tasks using it are done.
mlx::core::array packed_input(const mlx::core::array& a, mlx::core::cpu::CommandEncoder& encoder);

} // namespace vmlx
