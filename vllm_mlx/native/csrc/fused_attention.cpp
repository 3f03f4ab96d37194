#include <vector>

#include "fused.h"
#include "fused_kernels.h"
#include "kernels.h"
#include "mlx/backend/cpu/encoder.h"
#include "primitives.h"
#include "strided.h"

namespace vmlx {

namespace {

// inputs: x, norm_weight, q (w, s, b), k (w, s, b), v (w, s, b), inv_freq
constexpr int kQ = 2, kK = 5, kV = 8, kFreq = 11;

std::vector<mx::Shape> head_shapes(const mx::array& x, const mx::array& qw, const mx::array& kw, int n_heads, int n_kv_heads) {
  const int B = x.ndim() == 3 ? x.shape(0) : 1;
  const int L = x.shape(-2);
  return {
      {B, n_heads, L, qw.shape(0) / n_heads},
      {B, n_kv_heads, L, kw.shape(0) / n_kv_heads},
      {B, n_kv_heads, L, kw.shape(0) / n_kv_heads}};
}

QmmArgs projection(const std::vector<mx::array>& in, int first, int64_t M, int group_size, int bits) {
  return weight_args(in[first], in[first + 1], in[first + 2], M, group_size, bits);
}

} // namespace

std::vector<mx::array> attention_input(
    const mx::array& x,
    const mx::array& norm_weight,
    float eps,
    const std::vector<mx::array>& q_proj,
    const std::vector<mx::array>& k_proj,
    const std::vector<mx::array>& v_proj,
    int group_size,
    int bits,
    int n_heads,
    int n_kv_heads,
    const mx::array& inv_freq,
    int rope_dims,
    bool traditional,
    float rope_scale,
    int offset) {
  require(x.dtype() == mx::float32 && (x.ndim() == 2 || x.ndim() == 3), "x must be float32 [B, L, D] or [L, D]");
  require(norm_weight.dtype() == mx::float32 && norm_weight.ndim() == 1 && norm_weight.shape(0) == x.shape(-1), "norm_weight must be float32 [D]");
  const int D = x.shape(-1);
  for (const auto* p : {&q_proj, &k_proj, &v_proj}) {
    require(p->size() == 3, "a projection is (w, scales, biases)");
    check_weights((*p)[0], (*p)[1], (*p)[2], D, group_size, bits);
  }
  require(n_heads > 0 && n_kv_heads > 0 && q_proj[0].shape(0) % n_heads == 0, "q_proj rows must split into n_heads");
  require(k_proj[0].shape(0) == v_proj[0].shape(0) && k_proj[0].shape(0) % n_kv_heads == 0, "k/v_proj rows must split into n_kv_heads");
  const int head_dim = q_proj[0].shape(0) / n_heads;
  require(k_proj[0].shape(0) / n_kv_heads == head_dim, "q and k heads must have one size");
  require(rope_dims > 0 && rope_dims % 2 == 0 && rope_dims <= head_dim, "rope dims must be even and <= head_dim");
  require(inv_freq.dtype() == mx::float32 && inv_freq.ndim() == 1 && inv_freq.shape(0) == rope_dims / 2, "inv_freq must be float32 [dims / 2]");
  require(offset >= 0, "offset must be >= 0");
  auto stream = cpu_stream();
  std::vector<mx::array> inputs{x, as_contiguous(norm_weight, stream)};
  for (const auto* p : {&q_proj, &k_proj, &v_proj}) {
    for (const auto& a : *p) {
      inputs.push_back(as_contiguous(a, stream));
    }
  }
  inputs.push_back(as_contiguous(inv_freq, stream));
  AttentionInput::Params params{eps, group_size, bits, n_heads, n_kv_heads, rope_dims, traditional, rope_scale, offset};
  return mx::array::make_arrays(
      head_shapes(x, q_proj[0], k_proj[0], n_heads, n_kv_heads),
      {mx::float32, mx::float32, mx::float32},
      std::make_shared<AttentionInput>(stream, params),
      inputs);
}

void AttentionInput::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& encoder = mx::cpu::get_command_encoder(stream());
  const mx::array x = packed_input(inputs[0], encoder);
  encoder.set_input_array(x);
  for (size_t i = 1; i < inputs.size(); ++i) {
    encoder.set_input_array(inputs[i]);
  }
  for (auto& out : outputs) {
    out.set_data(mx::allocator::malloc(out.nbytes()));
    encoder.set_output_array(out);
  }
  const int64_t D = x.shape(-1);
  const int64_t B = outputs[0].shape(0);
  const int64_t L = outputs[0].shape(2);
  const int64_t Dh = outputs[0].shape(3);
  const int64_t M = B * L;
  QmmArgs q = projection(inputs, kQ, M, p_.group_size, p_.bits);
  QmmArgs k = projection(inputs, kK, M, p_.group_size, p_.bits);
  QmmArgs v = projection(inputs, kV, M, p_.group_size, p_.bits);
  RopeArgs rq = rope_heads(nullptr, outputs[0].data<float>(), B, p_.n_heads, L, Dh);
  RopeArgs rk = rope_heads(nullptr, outputs[1].data<float>(), B, p_.n_kv_heads, L, Dh);
  for (RopeArgs* r : {&rq, &rk}) {
    r->inv_freq = inputs[kFreq].data<float>();
    r->dims = p_.rope_dims;
    r->traditional = p_.traditional;
    r->scale = p_.rope_scale;
    r->offset = p_.offset;
  }
  const int64_t kv_width = p_.n_kv_heads * Dh;
  encoder.dispatch([=, xs = x.data<float>(), nw = inputs[1].data<float>(), vout = outputs[2].data<float>(),
                    eps = p_.eps, Hkv = p_.n_kv_heads]() mutable {
    thread_local std::vector<float> normed, qkv;
    normed.resize(M * D);
    qkv.resize(M * (q.N + 2 * kv_width));
    vmlx::rms_norm(xs, nw, normed.data(), M, D, eps);
    q.x = k.x = v.x = normed.data();
    q.y = qkv.data();
    k.y = q.y + M * q.N;
    v.y = k.y + M * kv_width;
    qmm(q);
    qmm(k);
    rq.x = q.y;
    rk.x = k.y;
    vmlx::rope(rq);
    vmlx::rope(rk);
    if (L == 1) { // [B, 1, H*Dh] is already [B, H, 1, Dh]
      v.y = vout;
      qmm(v);
      return;
    }
    qmm(v);
    const int64_t shape[4] = {B, Hkv, L, Dh};
    const int64_t strides[4] = {L * kv_width, Dh, kv_width, 1};
    gather_strided(v.y, {shape, shape + 4}, {strides, strides + 4}, vout);
  });
}

void AttentionInput::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  cpu_only();
}

bool AttentionInput::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const AttentionInput&>(other).p_;
  return p_.eps == o.eps && p_.group_size == o.group_size && p_.bits == o.bits && p_.n_heads == o.n_heads &&
      p_.n_kv_heads == o.n_kv_heads && p_.rope_dims == o.rope_dims && p_.traditional == o.traditional &&
      p_.rope_scale == o.rope_scale && p_.offset == o.offset;
}

std::vector<mx::Shape> AttentionInput::output_shapes(const std::vector<mx::array>& inputs) {
  return head_shapes(inputs[0], inputs[kQ], inputs[kK], p_.n_heads, p_.n_kv_heads);
}

} // namespace vmlx
