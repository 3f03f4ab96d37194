// Packing strided float32 (or float16: a KV cache's) views — transposed or sliced
// activations, trimmed caches — into contiguous temporaries inside a primitive, instead
// of a Contiguous node in the graph.
#pragma once

#include <cstdint>
#include <vector>

#include "mlx/array.h"
#include "mlx/backend/cpu/encoder.h"

namespace vmlx {

// dst[i] = src at the i-th index of `shape` (row-major) under element `strides`; T is
// float or uint16_t (half bits, copied as they are).
template <typename T>
void gather_strided(
    const T* src,
    const std::vector<int64_t>& shape,
    const std::vector<int64_t>& strides,
    T* dst);

// `a` (float32 or float16) itself when row-contiguous; else a new contiguous array of its dtype the encoder fills (a copy
// task queued before the caller's) and keeps alive until the tasks using it are done.
mlx::core::array packed_input(const mlx::core::array& a, mlx::core::cpu::CommandEncoder& encoder);

} // namespace vmlx
