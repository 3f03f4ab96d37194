// Python module vllm_mlx.native._kernels (nanobind, in MLX's nanobind domain so that
// mlx.core.array crosses the boundary as itself).
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "decode_step.h"
#include "fused.h"
#include "kernels.h"
#include "primitives.h"
#include "sampling.h"
#include "threadpool.h"

namespace nb = nanobind;
using namespace nb::literals;

NB_MODULE(_kernels, m) {
  nb::module_::import_("mlx.core");
  m.doc() = "vllm-mlx native CPU kernels (quantized matmul, decode attention) for MLX";
  m.def(
      "quantized_matmul",
      &vmlx::quantized_matmul,
      "x"_a,
      "w"_a,
      "scales"_a,
      "biases"_a,
      "group_size"_a,
      "bits"_a,
      "x @ dequantize(w, scales, biases).T for MLX's affine 4/8-bit layout (CPU).");
  m.def(
      "dequantize",
      &vmlx::dequantize,
      "w"_a,
      "scales"_a,
      "biases"_a,
      "group_size"_a,
      "bits"_a,
      "dequantize(w, scales, biases) as float32 [N, K], MLX's affine 4/8-bit layout (CPU).");
  m.def(
      "attention",
      &vmlx::attention,
      "q"_a,
      "k"_a,
      "v"_a,
      "scale"_a,
      "causal"_a = false,
      "softmax(q k^T * scale) v with grouped-query heads, no mask array (CPU).");
  m.def(
      "attention_masked",
      &vmlx::attention_masked,
      "q"_a,
      "k"_a,
      "v"_a,
      "scale"_a,
      "mask"_a,
      "softmax(q k^T * scale) v where a boolean mask (true: attend) allows (CPU).");
  m.def(
      "rms_norm",
      &vmlx::rms_norm,
      "x"_a,
      "weight"_a,
      "eps"_a,
      "x * rsqrt(mean(x^2, -1) + eps) * weight, float32 (CPU).");
  m.def(
      "rope",
      &vmlx::rope,
      "x"_a,
      "inv_freq"_a,
      "dims"_a,
      "traditional"_a,
      "scale"_a,
      "offset"_a,
      "mx.fast.rope for float32 x [B, H, L, D], inv_freq [dims/2] and an int offset (CPU).");
  m.def(
      "rope_offsets",
      &vmlx::rope_offsets,
      "x"_a,
      "inv_freq"_a,
      "offsets"_a,
      "dims"_a,
      "traditional"_a,
      "scale"_a,
      "mx.fast.rope with per-sequence int32 offsets [B] (CPU).");
  m.def(
      "mlp_block",
      &vmlx::mlp_block,
      "h"_a,
      "norm_weight"_a,
      "eps"_a,
      "gate"_a,
      "up"_a,
      "down"_a,
      "group_size"_a,
      "bits"_a,
      "h + down(silu(gate(n)) * up(n)), n = rms_norm(h): a quantized SwiGLU MLP block (CPU).");
  m.def(
      "attention_input",
      &vmlx::attention_input,
      "x"_a,
      "norm_weight"_a,
      "eps"_a,
      "q_proj"_a,
      "k_proj"_a,
      "v_proj"_a,
      "group_size"_a,
      "bits"_a,
      "n_heads"_a,
      "n_kv_heads"_a,
      "inv_freq"_a,
      "rope_dims"_a,
      "traditional"_a,
      "rope_scale"_a,
      "offset"_a,
      "[q, k, v] heads of rms_norm(x) through quantized q/k/v projections, q and k rotated (CPU).");
  nb::class_<vmlx::DecodeWeights>(m, "_DecodeWeights", "A decode stack's weights, checked once (decode_weights).");
  m.def(
      "decode_weights",
      [](const std::vector<vmlx::mx::array>& weights,
         int attention_group_size,
         int attention_bits,
         int mlp_group_size,
         int mlp_bits,
         int n_heads,
         int n_kv_heads) {
        vmlx::DecodeParams p{};
        p.attention_group_size = attention_group_size;
        p.attention_bits = attention_bits;
        p.mlp_group_size = mlp_group_size;
        p.mlp_bits = mlp_bits;
        p.n_heads = n_heads;
        p.n_kv_heads = n_kv_heads;
        return vmlx::decode_weights(weights, p);
      },
      "weights"_a,
      "attention_group_size"_a,
      "attention_bits"_a,
      "mlp_group_size"_a,
      "mlp_bits"_a,
      "n_heads"_a,
      "n_kv_heads"_a,
      "A stack's 23 arrays per layer, checked and held for decode_layers (CPU).");
  m.def(
      "decode_layers",
      [](const vmlx::mx::array& h,
         const vmlx::DecodeWeights& weights,
         const std::vector<vmlx::mx::array>& caches,
         const vmlx::mx::array& positions,
         const vmlx::mx::array& key_start,
         const vmlx::mx::array& inv_freq,
         float eps,
         int attention_group_size,
         int attention_bits,
         int mlp_group_size,
         int mlp_bits,
         int n_heads,
         int n_kv_heads,
         int rope_dims,
         bool traditional,
         float rope_scale,
         float scale,
         int write_index) {
        return vmlx::decode_layers(
            h,
            weights,
            caches,
            positions,
            key_start,
            inv_freq,
            {eps, attention_group_size, attention_bits, mlp_group_size, mlp_bits, n_heads, n_kv_heads,
             rope_dims, traditional, rope_scale, scale, write_index});
      },
      "h"_a,
      "weights"_a,
      "caches"_a,
      "positions"_a,
      "key_start"_a,
      "inv_freq"_a,
      "eps"_a,
      "attention_group_size"_a,
      "attention_bits"_a,
      "mlp_group_size"_a,
      "mlp_bits"_a,
      "n_heads"_a,
      "n_kv_heads"_a,
      "rope_dims"_a,
      "traditional"_a,
      "rope_scale"_a,
      "scale"_a,
      "write_index"_a,
      "[h, new key/value rows] of a stack of Llama layers for one token per sequence (CPU).");
  m.def(
      "kv_write",
      &vmlx::kv_write,
      "cache"_a,
      "rows"_a,
      "layer"_a,
      "which"_a,
      "index"_a,
      "cache with row `index` set to rows[layer, which], in place when MLX may donate it (CPU).");
  m.def(
      "softmax_causal",
      &vmlx::softmax_causal,
      "scores"_a,
      "offset"_a,
      "softmax over the last axis, query row i seeing keys 0 .. offset + i (CPU).");
  m.def("logsumexp", &vmlx::logsumexp, "x"_a, "log(sum(exp(x))) over the last axis, kept (CPU).");
  m.def(
      "sample",
      [](const vmlx::mx::array& logprobs, const vmlx::mx::array& bits, float top_p, float min_p, int top_k,
         float inv_temp) { return vmlx::sample(logprobs, bits, {top_p, min_p, top_k, inv_temp}); },
      "logprobs"_a,
      "bits"_a,
      "top_p"_a,
      "min_p"_a,
      "top_k"_a,
      "inv_temp"_a,
      "uint32 [B]: a token per row of log-probabilities, mlx-lm's filters and temperature (CPU).");
  m.def("kv_write_copies", &vmlx::kv_write_copies, "Cache buffers kv_write had to copy.");
  m.def("isa", []() { return std::string(vmlx::isa()); }, "The instruction set in use.");
  m.def(
      "set_isa",
      [](const std::string& name) { return vmlx::set_isa(name.c_str()); },
      "name"_a,
      "Select 'avx2' or 'generic'; False when this CPU lacks it.");
  m.def(
      "activations", []() { return std::string(vmlx::activations()); }, "How decode products read x.");
  m.def(
      "set_activations",
      [](const std::string& name) { return vmlx::set_activations(name.c_str()); },
      "name"_a,
      "Select 'int16' (default) or 'float' (exact) for single-row products.");
  m.def(
      "int16_body", []() { return std::string(vmlx::int16_body()); }, "Which body runs the int16 products.");
  m.def(
      "set_int16_body",
      [](const std::string& name) { return vmlx::set_int16_body(name.c_str()); },
      "name"_a,
      "Select 'vnni' (AVX-512 VNNI) or 'avx2' for the int16 products (the same bits); False when this CPU lacks it.");
  m.def(
      "packed_mode", []() { return std::string(vmlx::packed_mode_name()); }, "Which weights get packed copies.");
  m.def(
      "set_packed_mode",
      [](const std::string& name) { return vmlx::set_packed_mode(name.c_str()); },
      "name"_a,
      "'0' (no packed copies), '1' (every product's weights) or 'auto' (registered weights); False for another.");
  m.def(
      "register_packed",
      [](const mlx::core::array& w, const mlx::core::array& scales, const mlx::core::array& biases, int group_size, int bits) {
        vmlx::register_packed(w, scales, biases, group_size, bits);
      },
      "w"_a,
      "scales"_a,
      "biases"_a,
      "group_size"_a,
      "bits"_a,
      "Give these evaluated weights a packed copy (filled by their first product; freed with them).");
  m.def(
      "packed_count",
      []() {
        const vmlx::PackedCount c = vmlx::packed_count();
        return std::make_pair(c.entries, c.bytes);
      },
      "The live packed copies and their filled bytes (freed weights' copies dropped first).");
  m.def(
      "attention_body", []() { return std::string(vmlx::attention_body()); }, "Which body runs the attention.");
  m.def(
      "set_attention_body",
      [](const std::string& name) { return vmlx::set_attention_body(name.c_str()); },
      "name"_a,
      "Select 'bf16' (AVX-512 BF16) or 'float' for the attention; False when this CPU lacks it.");
  m.def(
      "threads",
      []() { return vmlx::ThreadPool::instance().size(); },
      "Threads the kernels use.");
  m.def(
      "set_placement",
      [](const std::string& name) { return vmlx::ThreadPool::instance().set_placement(name.c_str()); },
      "name"_a,
      "Where the pool's workers run: 'auto' (off the caller's CPU, or the caller alone: the faster lately), 'apart' or 'kernel'.");
  m.def(
      "placement",
      []() {
        auto& pool = vmlx::ThreadPool::instance();
        return std::make_pair(std::string(pool.placement()), pool.apart_now());
      },
      "The placement setting and whether the workers are apart now.");
}
