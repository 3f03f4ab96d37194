// MLX primitives around the CPU kernels, built as an MLX extension (the mechanism of
// MLX's "Custom Extensions" guide): they join MLX's lazy graph and run as tasks on the
// CPU stream, so a model step still evaluates as one graph.
#pragma once

#include <string>

#include "kernels.h"
#include "mlx/mlx.h"
#include "mlx/primitives.h"

namespace vmlx {

namespace mx = mlx::core;

// Shared by the primitives: MLX's default CPU stream, argument checks (std::invalid_argument,
// so Python callers can use MLX's own op instead), evaluated weights without a Contiguous node.
mx::Stream cpu_stream();
void require(bool ok, const std::string& message);
[[noreturn]] void cpu_only();
mx::array as_contiguous(const mx::array& a, mx::Stream stream);
void check_weights(
    const mx::array& w,
    const mx::array& scales,
    const mx::array& biases,
    int K,
    int group_size,
    int bits);

// The kernel arguments for one checked, evaluated projection (w, scales, biases) applied
// to M rows of x; x and y are the caller's (set before qmm runs).
QmmArgs weight_args(
    const mx::array& w,
    const mx::array& scales,
    const mx::array& biases,
    int64_t M,
    int group_size,
    int bits);

// The packed copy of these weights (packed_weights.cpp), filled by their first product's
// task (ensure_packed): made here when every product is packed ("1"), else the one
// register_packed made, or nullptr. Lives as long as the arrays' buffers.
PackedWeights* packed_copy(const mx::array& w, const mx::array& scales, const mx::array& biases, const QmmArgs& a);
// An entry for these (evaluated) weights, so their products run packed in any mode but off.
void register_packed(const mx::array& w, const mx::array& scales, const mx::array& biases, int group_size, int bits);
// The live entries and the bytes of the filled copies (expired entries dropped first).
struct PackedCount {
  int64_t entries, bytes;
};
PackedCount packed_count();

// x[..., K] @ dequantize(w, scales, biases)^T, MLX affine layout, bits 4 or 8,
// group size 32, 64 or 128, float32 x, float32 or float16 scales and biases (one dtype).
// Throws std::invalid_argument for anything else, so the caller can use MLX's own op.
mx::array quantized_matmul(
    const mx::array& x,
    const mx::array& w,
    const mx::array& scales,
    const mx::array& biases,
    int group_size,
    int bits);

// dequantize(w, scales, biases) as a float32 [N, K] array (same layouts as above).
mx::array dequantize(const mx::array& w, const mx::array& scales, const mx::array& biases, int group_size, int bits);

// softmax(q k^T * scale [causal]) v for float32 q [B, Hq, Lq, D], k/v [B, Hkv, Lk, D]
// both float32 or both float16 (a float16 KV cache; out is float32 either way), Hq a
// multiple of Hkv (grouped-query attention), without a mask array.
mx::array attention(
    const mx::array& q,
    const mx::array& k,
    const mx::array& v,
    float scale,
    bool causal);

// The same with a boolean mask (true: attend) broadcastable to [B, Hq, Lq, Lk].
mx::array attention_masked(
    const mx::array& q,
    const mx::array& k,
    const mx::array& v,
    float scale,
    const mx::array& mask);

class QuantizedMatmul : public mx::Primitive {
 public:
  QuantizedMatmul(mx::Stream stream, int group_size, int bits)
      : mx::Primitive(stream), group_size_(group_size), bits_(bits) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs)
      override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs)
      override;
  const char* name() const override {
    return "VllmMlxQuantizedMatmul";
  }
  bool is_equivalent(const mx::Primitive& other) const override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;

 private:
  int group_size_;
  int bits_;
};

class Dequantize : public mx::Primitive {
 public:
  Dequantize(mx::Stream stream, int group_size, int bits)
      : mx::Primitive(stream), group_size_(group_size), bits_(bits) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs)
      override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs)
      override;
  const char* name() const override {
    return "VllmMlxDequantize";
  }
  bool is_equivalent(const mx::Primitive& other) const override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;

 private:
  int group_size_;
  int bits_;
};

class Attention : public mx::Primitive {
 public:
  Attention(mx::Stream stream, float scale, bool causal)
      : mx::Primitive(stream), scale_(scale), causal_(causal) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs)
      override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs)
      override;
  const char* name() const override {
    return "VllmMlxAttention";
  }
  bool is_equivalent(const mx::Primitive& other) const override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;

 private:
  float scale_;
  bool causal_;
};

} // namespace vmlx
