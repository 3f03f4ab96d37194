// A whole stack of Llama decoder layers for one new token per sequence, as ONE MLX
// primitive. Per-layer fused nodes still left ~370 graph nodes and ~4 ms of Python graph
// building per token, next to ~13 ms of weight reads; one node per step (plus one small
// write per cache array) leaves only the kernels. The step only reads the caches (its
// own new rows come out as an array), and kv_write then puts each row in its cache,
// taking the cache's storage over when MLX may donate it (as its own SliceUpdate does):
// functional, so a cache another holder shares is copied, never changed under it.
#pragma once

#include "mlx/mlx.h"
#include "mlx/primitives.h"

namespace vmlx {

namespace mx = mlx::core;

struct DecodeParams {
  float eps;
  int attention_group_size, attention_bits; // q/k/v/o
  int mlp_group_size, mlp_bits; // gate/up/down
  int n_heads, n_kv_heads;
  int rope_dims;
  bool traditional;
  float rope_scale;
  float scale; // of the attention scores
  int write_index; // the cache row this token's keys and values go to (same for all)
};

// Weights per layer, in this order (kLayerWeights arrays): input norm, q, k, v, o
// (w, scales, biases each), post-attention norm, gate, up, down (w, scales, biases each).
constexpr int kLayerWeights = 23;

// A stack's weights checked, contiguous and evaluated once: the decode node holds them
// itself, not as graph inputs, so a step neither converts ~700 arrays from Python nor has
// MLX walk them before every evaluation.
struct DecodeWeights {
  std::shared_ptr<const std::vector<mx::array>> arrays;
  int layers, D, head_dim, hidden;
  DecodeParams checked; // the group sizes, bits and heads they were checked for
};

// weights: kLayerWeights arrays per layer; p's group sizes, bits and heads are checked.
DecodeWeights decode_weights(const std::vector<mx::array>& weights, const DecodeParams& p);

// h [B, 1, D] float32 -> {h after every layer, new rows [layers, 2, B, Hkv, head_dim]
// (this token's key, then value, per layer) of the caches' dtype}. caches: per layer k
// then v, all float32 or all float16, [B, Hkv, capacity, head_dim] holding rows
// 0 .. write_index - 1, capacity > write_index. Float16 caches: the new rows are rounded
// to half (as the cache holds them) before this step's attention reads them.
// positions int32 [B]: this token's RoPE position per sequence; key_start int32 [B]:
// the first cache row each sequence attends to (a batch's left padding).
std::vector<mx::array> decode_layers(
    const mx::array& h,
    const DecodeWeights& weights,
    const std::vector<mx::array>& caches,
    const mx::array& positions,
    const mx::array& key_start,
    const mx::array& inv_freq,
    const DecodeParams& params);

class DecodeLayers : public mx::Primitive {
 public:
  DecodeLayers(mx::Stream stream, DecodeParams p, DecodeWeights w)
      : mx::Primitive(stream), p_(p), w_(std::move(w)) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override {
    return "VllmMlxDecodeLayers";
  }
  bool is_equivalent(const mx::Primitive& other) const override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;

 private:
  DecodeParams p_;
  DecodeWeights w_;
};

// cache [B, Hkv, capacity, head_dim] (float32 or float16) with row `index` set to
// rows[layer, which] (the cache's dtype, or float32 rounded to half to nearest even as
// MLX's astype does): in place when MLX may donate the cache's storage, else into a copy.
mx::array kv_write(const mx::array& cache, const mx::array& rows, int layer, int which, int index);

class KvWrite : public mx::Primitive {
 public:
  KvWrite(mx::Stream stream, int layer, int which, int index)
      : mx::Primitive(stream), layer_(layer), which_(which), index_(index) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override {
    return "VllmMlxKvWrite";
  }
  bool is_equivalent(const mx::Primitive& other) const override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;

 private:
  int layer_, which_, index_;
};

// How many cache buffers kv_write had to copy because MLX could not donate them (a
// steady decode loop donates every one): for tests.
int64_t kv_write_copies();

} // namespace vmlx
