// MLX primitives for the per-layer work around the matmuls: RMSNorm, RoPE and a whole
// quantized SwiGLU MLP (norm + gate + up + SiLU·mul + down + residual) as one node each.
// MLX's CPU backend runs mx.fast.rms_norm / mx.fast.rope as their composed fallbacks
// (10-25 nodes each), and every graph node costs ~5-10 µs of evaluation on this CPU.
#pragma once

#include "mlx/mlx.h"
#include "mlx/primitives.h"

namespace vmlx {

namespace mx = mlx::core;

// x * rsqrt(mean(x^2, -1) + eps) * weight for float32 x [..., D] and weight [D].
mx::array rms_norm(const mx::array& x, const mx::array& weight, float eps);

// mx.fast.rope(x, dims, traditional=..., scale=..., offset=...) for float32 x [B, H, L, D]
// (any strides), an integer offset and inv_freq [dims / 2] (exp(-i ln(base) / (dims/2))
// computed by MLX, or 1 / freqs).
mx::array rope(
    const mx::array& x,
    const mx::array& inv_freq,
    int dims,
    bool traditional,
    float scale,
    int offset);

// The same with per-sequence offsets (int32 [B], may be negative: a left-padded batch).
mx::array rope_offsets(
    const mx::array& x,
    const mx::array& inv_freq,
    const mx::array& offsets,
    int dims,
    bool traditional,
    float scale);

// h + down(silu(gate(n)) * up(n)), n = rms_norm(h, norm_weight, eps): mlx-lm's Llama MLP
// block on quantized gate/up/down weights (one group size and bit width for all three).
mx::array mlp_block(
    const mx::array& h,
    const mx::array& norm_weight,
    float eps,
    const std::vector<mx::array>& gate,
    const std::vector<mx::array>& up,
    const std::vector<mx::array>& down,
    int group_size,
    int bits);

class RmsNorm : public mx::Primitive {
 public:
  RmsNorm(mx::Stream stream, float eps) : mx::Primitive(stream), eps_(eps) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override {
    return "VllmMlxRmsNorm";
  }
  bool is_equivalent(const mx::Primitive& other) const override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;

 private:
  float eps_;
};

class Rope : public mx::Primitive {
 public:
  Rope(mx::Stream stream, int dims, bool traditional, float scale, int offset)
      : mx::Primitive(stream), dims_(dims), traditional_(traditional), scale_(scale), offset_(offset) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override {
    return "VllmMlxRope";
  }
  bool is_equivalent(const mx::Primitive& other) const override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;

 private:
  int dims_;
  bool traditional_;
  float scale_;
  int offset_;
};

class MlpBlock : public mx::Primitive {
 public:
  MlpBlock(mx::Stream stream, float eps, int group_size, int bits)
      : mx::Primitive(stream), eps_(eps), group_size_(group_size), bits_(bits) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override {
    return "VllmMlxMlpBlock";
  }
  bool is_equivalent(const mx::Primitive& other) const override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;

 private:
  float eps_;
  int group_size_;
  int bits_;
};

} // namespace vmlx

namespace vmlx {

// The input half of mlx-lm's Llama attention in one node: n = rms_norm(x, norm_weight),
// q/k/v = n @ W^T (quantized, no bias), split into heads [B, H, L, head_dim] and q, k
// rotated by rope (inv_freq, dims, traditional, scale, offset as in vmlx::rope).
// Returns {q, k, v}.
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
    int offset);

class AttentionInput : public mx::Primitive {
 public:
  struct Params {
    float eps;
    int group_size, bits, n_heads, n_kv_heads, rope_dims;
    bool traditional;
    float rope_scale;
    int offset;
  };
  AttentionInput(mx::Stream stream, Params p) : mx::Primitive(stream), p_(p) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override {
    return "VllmMlxAttentionInput";
  }
  bool is_equivalent(const mx::Primitive& other) const override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;

 private:
  Params p_;
};

// softmax over the last axis of float32 scores [..., L, Lk] where query row i (of L)
// sees keys 0 .. offset + i (offset >= Lk - 1: every key); the hidden ones come out 0.
// MLX's CPU softmax runs its exp one lane at a time: this is the prefill attention's.
mx::array softmax_causal(const mx::array& scores, int offset);

class SoftmaxCausal : public mx::Primitive {
 public:
  SoftmaxCausal(mx::Stream stream, int offset) : mx::Primitive(stream), offset_(offset) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override {
    return "VllmMlxSoftmaxCausal";
  }
  bool is_equivalent(const mx::Primitive& other) const override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;

 private:
  int offset_;
};

// log(sum(exp(x))) over the last axis of float32 x, keeping it (size 1): MLX's CPU
// logsumexp runs its exp one lane at a time (~1 ms over a 49k vocabulary, every token).
mx::array logsumexp(const mx::array& x);

class LogSumExp : public mx::Primitive {
 public:
  explicit LogSumExp(mx::Stream stream) : mx::Primitive(stream) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override {
    return "VllmMlxLogSumExp";
  }
  bool is_equivalent(const mx::Primitive&) const override {
    return true;
  }
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;
};

} // namespace vmlx
