#include "fused.h"

#include <vector>

#include "fused_kernels.h"
#include "kernels.h"
#include "mlx/backend/cpu/encoder.h"
#include "primitives.h"
#include "strided.h"

namespace vmlx {

namespace {

void check_norm(const mx::array& x, const mx::array& weight) {
  require(x.dtype() == mx::float32 && weight.dtype() == mx::float32, "x and weight must be float32");
  require(x.ndim() >= 1 && weight.ndim() == 1 && weight.shape(0) == x.shape(-1), "weight must be [x.shape[-1]]");
}

// The quantized weights of one projection: (w, scales, biases), checked for x's width K.
void check_projection(const std::vector<mx::array>& p, int K, int group_size, int bits) {
  require(p.size() == 3, "a projection is (w, scales, biases)");
  check_weights(p[0], p[1], p[2], K, group_size, bits);
}

QmmArgs qmm_args(const float* x, const std::vector<mx::array>& in, int first, float* y, int64_t M, int group_size, int bits) {
  QmmArgs a = weight_args(in[first], in[first + 1], in[first + 2], M, group_size, bits);
  a.x = x;
  a.y = y;
  return a;
}

} // namespace

mx::array rms_norm(const mx::array& x, const mx::array& weight, float eps) {
  check_norm(x, weight);
  auto stream = cpu_stream();
  return mx::array(
      x.shape(), mx::float32, std::make_shared<RmsNorm>(stream, eps), {x, as_contiguous(weight, stream)});
}

void RmsNorm::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& encoder = mx::cpu::get_command_encoder(stream());
  const mx::array x = packed_input(inputs[0], encoder);
  const auto& w = inputs[1];
  auto& out = outputs[0];
  out.set_data(mx::allocator::malloc(out.nbytes()));
  encoder.set_input_array(x);
  encoder.set_input_array(w);
  encoder.set_output_array(out);
  const int64_t D = x.shape(-1);
  const int64_t M = D == 0 ? 0 : static_cast<int64_t>(x.size()) / D;
  encoder.dispatch([x = x.data<float>(), w = w.data<float>(), y = out.data<float>(), M, D, eps = eps_]() {
    vmlx::rms_norm(x, w, y, M, D, eps);
  });
}

void RmsNorm::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  cpu_only();
}

bool RmsNorm::is_equivalent(const mx::Primitive& other) const {
  return eps_ == static_cast<const RmsNorm&>(other).eps_;
}

std::vector<mx::Shape> RmsNorm::output_shapes(const std::vector<mx::array>& inputs) {
  return {inputs[0].shape()};
}

namespace {

void check_rope(const mx::array& x, const mx::array& inv_freq, int dims) {
  require(x.dtype() == mx::float32 && x.ndim() == 4, "x must be float32 [B, H, L, D]");
  require(dims > 0 && dims % 2 == 0 && dims <= x.shape(3), "dims must be even and <= D");
  require(
      inv_freq.dtype() == mx::float32 && inv_freq.ndim() == 1 && inv_freq.shape(0) == dims / 2,
      "inv_freq must be float32 [dims / 2]");
}

} // namespace

mx::array rope(
    const mx::array& x,
    const mx::array& inv_freq,
    int dims,
    bool traditional,
    float scale,
    int offset) {
  check_rope(x, inv_freq, dims);
  require(offset >= 0, "offset must be >= 0");
  auto stream = cpu_stream();
  return mx::array(
      x.shape(),
      mx::float32,
      std::make_shared<Rope>(stream, dims, traditional, scale, offset),
      {x, as_contiguous(inv_freq, stream)});
}

mx::array rope_offsets(
    const mx::array& x,
    const mx::array& inv_freq,
    const mx::array& offsets,
    int dims,
    bool traditional,
    float scale) {
  check_rope(x, inv_freq, dims);
  require(
      offsets.dtype() == mx::int32 && offsets.ndim() == 1 && offsets.shape(0) == x.shape(0),
      "offsets must be int32 [B]");
  auto stream = cpu_stream();
  return mx::array(
      x.shape(),
      mx::float32,
      std::make_shared<Rope>(stream, dims, traditional, scale, 0),
      {x, as_contiguous(inv_freq, stream), as_contiguous(offsets, stream)});
}

void Rope::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  const auto& x = inputs[0];
  auto& out = outputs[0];
  out.set_data(mx::allocator::malloc(out.nbytes()));
  auto& encoder = mx::cpu::get_command_encoder(stream());
  encoder.set_input_array(x);
  encoder.set_output_array(out);
  RopeArgs args{};
  args.x = x.data<float>();
  args.inv_freq = inputs[1].data<float>();
  encoder.set_input_array(inputs[1]);
  args.y = out.data<float>();
  args.B = x.shape(0);
  args.H = x.shape(1);
  args.L = x.shape(2);
  args.D = x.shape(3);
  for (int i = 0; i < 4; ++i) {
    args.strides[i] = x.strides()[i];
  }
  args.dims = dims_;
  args.traditional = traditional_;
  args.scale = scale_;
  args.offset = offset_;
  if (inputs.size() == 3) { // per-sequence offsets
    encoder.set_input_array(inputs[2]);
    args.offsets = inputs[2].data<int32_t>();
  }
  encoder.dispatch([args]() { vmlx::rope(args); });
}

void Rope::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  cpu_only();
}

bool Rope::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const Rope&>(other);
  return dims_ == o.dims_ && traditional_ == o.traditional_ && scale_ == o.scale_ &&
      offset_ == o.offset_;
}

std::vector<mx::Shape> Rope::output_shapes(const std::vector<mx::array>& inputs) {
  return {inputs[0].shape()};
}

mx::array mlp_block(
    const mx::array& h,
    const mx::array& norm_weight,
    float eps,
    const std::vector<mx::array>& gate,
    const std::vector<mx::array>& up,
    const std::vector<mx::array>& down,
    int group_size,
    int bits) {
  check_norm(h, norm_weight);
  const int D = h.shape(-1);
  check_projection(gate, D, group_size, bits);
  check_projection(up, D, group_size, bits);
  const int hidden = gate[0].shape(0);
  require(up[0].shape(0) == hidden, "gate and up must have one output width");
  check_projection(down, hidden, group_size, bits);
  require(down[0].shape(0) == D, "down must map back to x's width");
  auto stream = cpu_stream();
  std::vector<mx::array> inputs{h, as_contiguous(norm_weight, stream)};
  for (const auto* p : {&gate, &up, &down}) {
    for (const auto& a : *p) {
      inputs.push_back(as_contiguous(a, stream));
    }
  }
  return mx::array(
      h.shape(), mx::float32, std::make_shared<MlpBlock>(stream, eps, group_size, bits), std::move(inputs));
}

void MlpBlock::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& encoder = mx::cpu::get_command_encoder(stream());
  const mx::array h = packed_input(inputs[0], encoder);
  auto& out = outputs[0];
  out.set_data(mx::allocator::malloc(out.nbytes()));
  encoder.set_input_array(h);
  for (size_t i = 1; i < inputs.size(); ++i) {
    encoder.set_input_array(inputs[i]);
  }
  encoder.set_output_array(out);
  const int64_t D = h.shape(-1);
  const int64_t M = static_cast<int64_t>(h.size()) / D;
  const int64_t hidden = inputs[2].shape(0);
  const float* x = h.data<float>();
  const float* norm_w = inputs[1].data<float>();
  float* y = out.data<float>();
  // the intermediate rows live in the task (thread_local on MLX's CPU stream thread)
  QmmArgs gate = qmm_args(nullptr, inputs, 2, nullptr, M, group_size_, bits_);
  QmmArgs up = qmm_args(nullptr, inputs, 5, nullptr, M, group_size_, bits_);
  QmmArgs down = qmm_args(nullptr, inputs, 8, y, M, group_size_, bits_);
  encoder.dispatch([=, eps = eps_]() mutable {
    thread_local std::vector<float> normed, g, u;
    normed.resize(M * D);
    g.resize(M * hidden);
    u.resize(M * hidden);
    vmlx::rms_norm(x, norm_w, normed.data(), M, D, eps);
    gate.x = up.x = normed.data();
    gate.y = g.data();
    up.y = u.data();
    qmm(gate);
    qmm(up);
    silu_mul(g.data(), u.data(), g.data(), M * hidden);
    down.x = g.data();
    qmm(down);
    for (int64_t i = 0; i < M * D; ++i) {
      y[i] += x[i];
    }
  });
}

void MlpBlock::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  cpu_only();
}

bool MlpBlock::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const MlpBlock&>(other);
  return eps_ == o.eps_ && group_size_ == o.group_size_ && bits_ == o.bits_;
}

std::vector<mx::Shape> MlpBlock::output_shapes(const std::vector<mx::array>& inputs) {
  return {inputs[0].shape()};
}

} // namespace vmlx
