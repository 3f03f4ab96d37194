#include <cstring>

#include "fused.h"
#include "fused_kernels.h"
#include "mlx/backend/cpu/encoder.h"
#include "primitives.h"
#include "strided.h"

namespace vmlx {

mx::array softmax_causal(const mx::array& scores, int offset) {
  require(scores.dtype() == mx::float32 && scores.ndim() >= 2, "scores must be float32 [..., L, Lk]");
  require(offset >= 0, "offset must be >= 0");
  return mx::array(scores.shape(), mx::float32, std::make_shared<SoftmaxCausal>(cpu_stream(), offset), {scores});
}

void SoftmaxCausal::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& encoder = mx::cpu::get_command_encoder(stream());
  const mx::array scores = packed_input(inputs[0], encoder);
  auto& out = outputs[0];
  const bool in_place = scores.is_donatable() && scores.flags().row_contiguous;
  if (in_place) {
    out.copy_shared_buffer(scores);
  } else {
    out.set_data(mx::allocator::malloc(out.nbytes()));
  }
  const int64_t width = scores.shape(-1);
  const int64_t period = scores.shape(-2);
  const int64_t rows = width == 0 ? 0 : static_cast<int64_t>(scores.size()) / width;
  encoder.dispatch([src = scores.data<float>(), dst = out.data<float>(), in_place, rows, width, period,
                    offset = offset_]() {
    if (!in_place) {
      std::memcpy(dst, src, rows * width * sizeof(float));
    }
    vmlx::softmax_causal(dst, rows, width, period, offset);
  });
}

void SoftmaxCausal::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  cpu_only();
}

bool SoftmaxCausal::is_equivalent(const mx::Primitive& other) const {
  return offset_ == static_cast<const SoftmaxCausal&>(other).offset_;
}

std::vector<mx::Shape> SoftmaxCausal::output_shapes(const std::vector<mx::array>& inputs) {
  return {inputs[0].shape()};
}

mx::array logsumexp(const mx::array& x) {
  require(x.dtype() == mx::float32 && x.ndim() >= 1 && x.shape(-1) > 0, "x must be float32 [..., n > 0]");
  mx::Shape shape = x.shape();
  shape.back() = 1;
  return mx::array(shape, mx::float32, std::make_shared<LogSumExp>(cpu_stream()), {x});
}

void LogSumExp::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& encoder = mx::cpu::get_command_encoder(stream());
  const mx::array x = packed_input(inputs[0], encoder);
  auto& out = outputs[0];
  out.set_data(mx::allocator::malloc(out.nbytes()));
  const int64_t width = x.shape(-1);
  const int64_t rows = static_cast<int64_t>(x.size()) / width;
  encoder.set_input_array(x);
  encoder.set_output_array(out);
  encoder.dispatch([src = x.data<float>(), dst = out.data<float>(), rows, width]() {
    vmlx::logsumexp_rows(src, dst, rows, width);
  });
}

void LogSumExp::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  cpu_only();
}

std::vector<mx::Shape> LogSumExp::output_shapes(const std::vector<mx::array>& inputs) {
  mx::Shape shape = inputs[0].shape();
  shape.back() = 1;
  return {shape};
}

} // namespace vmlx
