#include "strided.h"

namespace vmlx {

namespace mx = mlx::core;

template <typename T>
void gather_strided(
    const T* src,
    const std::vector<int64_t>& shape,
    const std::vector<int64_t>& strides,
    T* dst) {
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
    const T* row = src + offset;
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

template void gather_strided<float>(const float*, const std::vector<int64_t>&, const std::vector<int64_t>&, float*);
template void gather_strided<uint16_t>(
    const uint16_t*,
    const std::vector<int64_t>&,
    const std::vector<int64_t>&,
    uint16_t*);

namespace {

template <typename T>
void pack_task(const mx::array& a, mx::array& packed, mx::cpu::CommandEncoder& encoder) {
  std::vector<int64_t> shape(a.shape().begin(), a.shape().end());
  std::vector<int64_t> strides(a.strides().begin(), a.strides().end());
  encoder.dispatch([src = a.data<T>(), dst = packed.data<T>(), shape, strides]() {
    gather_strided(src, shape, strides, dst);
  });
}

} // namespace

mx::array packed_input(const mx::array& a, mx::cpu::CommandEncoder& encoder) {
  if (a.flags().row_contiguous) {
    return a;
  }
  mx::array packed(a.shape(), a.dtype(), nullptr, {});
  packed.set_data(mx::allocator::malloc(packed.nbytes()));
  encoder.set_input_array(a);
  encoder.set_output_array(packed);
  if (a.dtype() == mx::float16) {
    pack_task<uint16_t>(a, packed, encoder);
  } else {
    pack_task<float>(a, packed, encoder);
  }
  encoder.add_temporary(packed);
  return packed;
}

} // namespace vmlx
