// Small per-row kernels a decoder layer needs around its matmuls (RMSNorm, RoPE, SwiGLU),
// so a layer's norm, rotary embedding and MLP each run as one MLX primitive instead of
// the 10-25 graph nodes MLX's CPU fallbacks of mx.fast.rms_norm / mx.fast.rope build.
#pragma once

#include <cstdint>

namespace vmlx {

// y[m, :] = x[m, :] * rsqrt(mean(x[m, :]^2) + eps) * w, rows of D contiguous floats.
void rms_norm(const float* x, const float* w, float* y, int64_t M, int64_t D, float eps);

// Rotary embedding of x [B, H, L, D] (element strides) into contiguous y, position of
// row l = offset + l, the first `dims` features rotated (pairs (i, i + dims/2), or
// (2i, 2i+1) when traditional) by angle position * scale * inv_freq[i], the rest copied;
// mx.fast.rope's definition. inv_freq comes from MLX (its exp), so angles match its own.
struct RopeArgs {
  const float* x;
  const float* inv_freq; // [dims / 2]
  float* y;
  int64_t B, H, L, D;
  int64_t strides[4];
  int dims;
  bool traditional;
  float scale;
  int64_t offset;
  const int32_t* offsets; // [B] per-sequence offsets (a batched cache), or nullptr
};
void rope(const RopeArgs& a);

// RopeArgs reading rows [B*L, H*Dh] (a projection's output, heads side by side) as
// [B, H, L, Dh] into contiguous dst; the rotation's parameters are the caller's to set.
RopeArgs rope_heads(const float* src, float* dst, int64_t B, int64_t H, int64_t L, int64_t Dh);

// y[i] = silu(g[i]) * u[i], silu(t) = t * sigmoid(t) (mlx-lm's swiglu).
void silu_mul(const float* g, const float* u, float* y, int64_t n);

// In place, each row r of `rows` rows of `width` floats: softmax over its first
// visible(r) = min(width, offset + r % period + 1) entries, zeros after (a causal block of
// `period` query rows whose first row sees keys 0 .. offset); rows spread over the pool.
void softmax_causal(float* s, int64_t rows, int64_t width, int64_t period, int64_t offset);

// out[r] = log(sum_j exp(x[r, j])) over `rows` rows of `width` floats, as MLX's
// logsumexp: nan if a row holds one, +inf if it holds +inf, -inf if all are -inf.
void logsumexp_rows(const float* x, float* out, int64_t rows, int64_t width);

namespace avx2 {
float logsumexp_row(const float* x, int64_t n);
void silu_mul(const float* g, const float* u, float* y, int64_t n);
// softmax over s[0, n), zeros in s[n, width)
void softmax_row(float* s, int64_t n, int64_t width);
} // namespace avx2

} // namespace vmlx
