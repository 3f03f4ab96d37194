#include "primitives.h"

#include <stdexcept>
#include <string>

#include "kernels.h"
#include "mlx/backend/cpu/encoder.h"
#include "strided.h"

namespace vmlx {

mx::Stream cpu_stream() {
  return mx::default_stream(mx::Device(mx::Device::cpu));
}

void require(bool ok, const std::string& message) {
  if (!ok) {
    throw std::invalid_argument("vllm_mlx.native: " + message);
  }
}

void cpu_only() {
  throw std::runtime_error("vllm_mlx.native kernels run on the CPU only");
}

// Weights are evaluated, contiguous arrays: a Contiguous node per weight per call (4 per
// matmul, 844 per decode step of the default model) costs more than the matmul itself.
mx::array as_contiguous(const mx::array& a, mx::Stream stream) {
  if (a.is_available() && a.flags().row_contiguous) {
    return a;
  }
  return mx::contiguous(a, false, stream);
}

void check_weights(
    const mx::array& w,
    const mx::array& scales,
    const mx::array& biases,
    int K,
    int group_size,
    int bits) {
  require(bits == 4 || bits == 8, "bits must be 4 or 8");
  require(group_size == 32 || group_size == 64 || group_size == 128, "group size must be 32, 64 or 128");
  require(w.dtype() == mx::uint32 && w.ndim() == 2, "w must be a 2-D uint32 array");
  require(
      scales.dtype() == biases.dtype() && (scales.dtype() == mx::float32 || scales.dtype() == mx::float16),
      "scales and biases must both be float32 or both float16");
  require(static_cast<int64_t>(w.shape(1)) * 32 / bits == K, "w does not match x's last dimension");
  require(K % group_size == 0, "K must be a multiple of the group size");
  const mx::Shape group_shape{w.shape(0), K / group_size};
  require(scales.shape() == group_shape && biases.shape() == group_shape, "scales/biases must be [N, K / group_size]");
}

QmmArgs weight_args(
    const mx::array& w,
    const mx::array& scales,
    const mx::array& biases,
    int64_t M,
    int group_size,
    int bits) {
  const bool f16 = scales.dtype() == mx::float16; // check_weights: biases the same
  QmmArgs args{
      nullptr,
      w.data<uint32_t>(),
      f16 ? nullptr : scales.data<float>(),
      f16 ? nullptr : biases.data<float>(),
      nullptr,
      M,
      static_cast<int64_t>(w.shape(0)),
      static_cast<int64_t>(w.shape(1)) * 32 / bits,
      group_size,
      bits};
  if (f16) { // mx::float16_t is IEEE half: its bits are what the kernels convert
    args.scales_f16 = reinterpret_cast<const uint16_t*>(scales.data<mx::float16_t>());
    args.biases_f16 = reinterpret_cast<const uint16_t*>(biases.data<mx::float16_t>());
  }
  if (M > 0 && packed_products()) {
    args.packed = packed_copy(w, scales, biases, args);
  }
  return args;
}

mx::array quantized_matmul(
    const mx::array& x,
    const mx::array& w,
    const mx::array& scales,
    const mx::array& biases,
    int group_size,
    int bits) {
  require(x.dtype() == mx::float32, "x must be float32");
  require(x.ndim() >= 1, "x must have at least one dimension");
  const int K = x.shape(-1);
  const int N = w.shape(0);
  check_weights(w, scales, biases, K, group_size, bits);
  auto stream = cpu_stream();
  mx::Shape out_shape = x.shape();
  out_shape.back() = N;
  return mx::array(
      out_shape,
      mx::float32,
      std::make_shared<QuantizedMatmul>(stream, group_size, bits),
      {x, as_contiguous(w, stream), as_contiguous(scales, stream), as_contiguous(biases, stream)});
}

void QuantizedMatmul::eval_cpu(
    const std::vector<mx::array>& inputs,
    std::vector<mx::array>& outputs) {
  const auto& w = inputs[1];
  const auto& scales = inputs[2];
  const auto& biases = inputs[3];
  auto& out = outputs[0];
  out.set_data(mx::allocator::malloc(out.nbytes()));
  auto& encoder = mx::cpu::get_command_encoder(stream());
  // x may be a view (a transposed or sliced activation): packed into a temporary first
  const mx::array x = packed_input(inputs[0], encoder);
  encoder.set_input_array(x);
  encoder.set_input_array(w);
  encoder.set_input_array(scales);
  encoder.set_input_array(biases);
  encoder.set_output_array(out);
  QmmArgs args = weight_args(w, scales, biases, static_cast<int64_t>(x.size() / x.shape(-1)), group_size_, bits_);
  args.x = x.data<float>();
  args.y = out.data<float>();
  encoder.dispatch([args]() { qmm(args); });
}

void QuantizedMatmul::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  cpu_only();
}

bool QuantizedMatmul::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const QuantizedMatmul&>(other);
  return group_size_ == o.group_size_ && bits_ == o.bits_;
}

std::vector<mx::Shape> QuantizedMatmul::output_shapes(const std::vector<mx::array>& inputs) {
  mx::Shape shape = inputs[0].shape();
  shape.back() = inputs[1].shape(0);
  return {shape};
}

mx::array dequantize(
    const mx::array& w,
    const mx::array& scales,
    const mx::array& biases,
    int group_size,
    int bits) {
  require(w.ndim() == 2, "w must be a 2-D uint32 array");
  const int K = static_cast<int>(static_cast<int64_t>(w.shape(1)) * 32 / bits);
  check_weights(w, scales, biases, K, group_size, bits);
  auto stream = cpu_stream();
  return mx::array(
      {w.shape(0), K},
      mx::float32,
      std::make_shared<Dequantize>(stream, group_size, bits),
      {as_contiguous(w, stream), as_contiguous(scales, stream), as_contiguous(biases, stream)});
}

void Dequantize::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  const auto& w = inputs[0];
  const auto& scales = inputs[1];
  const auto& biases = inputs[2];
  auto& out = outputs[0];
  out.set_data(mx::allocator::malloc(out.nbytes()));
  auto& encoder = mx::cpu::get_command_encoder(stream());
  encoder.set_input_array(w);
  encoder.set_input_array(scales);
  encoder.set_input_array(biases);
  encoder.set_output_array(out);
  QmmArgs args = weight_args(w, scales, biases, 0, group_size_, bits_);
  args.y = out.data<float>();
  encoder.dispatch([args]() { dequantize_weights(args); });
}

void Dequantize::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  cpu_only();
}

bool Dequantize::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const Dequantize&>(other);
  return group_size_ == o.group_size_ && bits_ == o.bits_;
}

std::vector<mx::Shape> Dequantize::output_shapes(const std::vector<mx::array>& inputs) {
  return {{inputs[0].shape(0), static_cast<int>(static_cast<int64_t>(inputs[0].shape(1)) * 32 / bits_)}};
}

mx::array attention(
    const mx::array& q,
    const mx::array& k,
    const mx::array& v,
    float scale,
    bool causal) {
  require(q.dtype() == mx::float32, "q must be float32");
  require(k.dtype() == v.dtype() && (k.dtype() == mx::float32 || k.dtype() == mx::float16),
          "k and v must both be float32 or both float16");
  require(q.ndim() == 4 && k.ndim() == 4 && v.ndim() == 4, "q, k, v must be 4-D [B, H, L, D]");
  require(k.shape() == v.shape(), "k and v must have one shape");
  require(q.shape(0) == k.shape(0) && q.shape(3) == k.shape(3), "q and k must agree on B and D");
  require(k.shape(1) > 0 && q.shape(1) % k.shape(1) == 0, "query heads must be a multiple of KV heads");
  require(!causal || q.shape(2) <= k.shape(2), "causal attention needs Lq <= Lk");
  auto stream = cpu_stream();
  return mx::array(
      q.shape(), mx::float32, std::make_shared<Attention>(stream, scale, causal), {q, k, v});
}

mx::array attention_masked(
    const mx::array& q,
    const mx::array& k,
    const mx::array& v,
    float scale,
    const mx::array& mask) {
  (void)attention(q, k, v, scale, false); // the checks of q, k and v
  require(mask.dtype() == mx::bool_ && mask.ndim() == 4, "mask must be a 4-D boolean array");
  const mx::Shape full{q.shape(0), q.shape(1), q.shape(2), k.shape(2)};
  for (int i = 0; i < 4; ++i) {
    require(mask.shape(i) == 1 || mask.shape(i) == full[i], "mask must broadcast to [B, Hq, Lq, Lk]");
  }
  auto stream = cpu_stream();
  return mx::array(
      q.shape(),
      mx::float32,
      std::make_shared<Attention>(stream, scale, false),
      {q, k, v, mx::broadcast_to(mask, full, stream)});
}

void Attention::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  const auto& q = inputs[0];
  const auto& k = inputs[1];
  const auto& v = inputs[2];
  auto& out = outputs[0];
  out.set_data(mx::allocator::malloc(out.nbytes()));
  auto& encoder = mx::cpu::get_command_encoder(stream());
  encoder.set_input_array(q);
  encoder.set_input_array(k);
  encoder.set_input_array(v);
  encoder.set_output_array(out);
  SdpaArgs args{};
  args.q = q.data<float>();
  if (k.dtype() == mx::float16) { // a float16 KV cache, read as half bits
    args.k_f16 = k.data<uint16_t>();
    args.v_f16 = v.data<uint16_t>();
  } else {
    args.k = k.data<float>();
    args.v = v.data<float>();
  }
  args.out = out.data<float>();
  args.B = q.shape(0);
  args.Hq = q.shape(1);
  args.Lq = q.shape(2);
  args.D = q.shape(3);
  args.Hkv = k.shape(1);
  args.Lk = k.shape(2);
  for (int i = 0; i < 4; ++i) {
    args.q_strides[i] = q.strides()[i];
    args.k_strides[i] = k.strides()[i];
    args.v_strides[i] = v.strides()[i];
  }
  args.scale = scale_;
  args.causal = causal_;
  if (inputs.size() == 4) { // a boolean mask, broadcast to [B, Hq, Lq, Lk] (stride 0)
    encoder.set_input_array(inputs[3]);
    args.mask = inputs[3].data<bool>();
    for (int i = 0; i < 4; ++i) {
      args.mask_strides[i] = inputs[3].strides()[i];
    }
  }
  encoder.dispatch([args]() { sdpa(args); });
}

void Attention::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  cpu_only();
}

bool Attention::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const Attention&>(other);
  return scale_ == o.scale_ && causal_ == o.causal_;
}

std::vector<mx::Shape> Attention::output_shapes(const std::vector<mx::array>& inputs) {
  return {inputs[0].shape()};
}

} // namespace vmlx
