#include "strided.h"

namespace vmlx {

namespace mx = mlx::core;

void gather_strided(
    const float* src,
    const std::vector<int64_t>& shape,
    const std::vector<int64_t>& strides,
    float* dst) {
  const size_t ndim = shape.size();
  if (ndim == 0) {
    *dst = *src;
    return;
  }
  int64_t total = 1;
  for (int64_t n : shape) {
    total *= n;
  }
  std::vector<int64_t> index(ndim, 0);
  const int64_t inner = shape[ndim - 1];
  const int64_t inner_stride = strides[ndim - 1];
  for (int64_t done = 0; done < total; done += inner) {
    int64_t offset = 0;
    for (size_t d = 0; d + 1 < ndim; ++d) {
      offset += index[d] * strides[d];
    }
    const float* row = src + offset;
    for (int64_t j = 0; j < inner; ++j) {
      dst[done + j] = row[j * inner_stride];
    }
    for (size_t d = ndim - 1; d-- > 0;) { // odometer over the outer dimensions
      if (++index[d] < shape[d]) {
        break;
      }
      index[d] = 0;
    }
  }
}

mx::array packed_input(const mx::array& a, mx::cpu::CommandEncoder& encoder) {
  if (a.flags().row_contiguous) {
    return a;
  }
  mx::array packed(a.shape(), mx::float32, nullptr, {});
  packed.set_data(mx::allocator::malloc(packed.nbytes()));
  std::vector<int64_t> shape(a.shape().begin(), a.shape().end());
  std::vector<int64_t> strides(a.strides().begin(), a.strides().end());
  encoder.set_input_array(a);
  encoder.set_output_array(packed);
  encoder.dispatch([src = a.data<float>(), dst = packed.data<float>(), shape, strides]() {
    gather_strided(src, shape, strides, dst);
  });
  encoder.add_temporary(packed);
  return packed;
}

} // namespace vmlx
