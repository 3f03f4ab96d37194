// AVX2 + FMA bodies of the per-row kernels (fused_kernels.h): compiled with -mavx2 -mfma
// and called only when the CPU has both (fused_kernels.cpp dispatches).
#include <algorithm>
#include <cmath>
#include <limits>

#include "avx2_math.h"
#include "fused_kernels.h"

namespace vmlx::avx2 {

void silu_mul(const float* g, const float* u, float* y, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(g + i);
    // sigmoid(x) from e = exp(-|x|) <= 1, so exp never overflows
    const __m256 e = exp256(_mm256_or_ps(x, sign));
    const __m256 inv = _mm256_div_ps(one, _mm256_add_ps(one, e));
    const __m256 positive = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ);
    const __m256 sigmoid = _mm256_blendv_ps(_mm256_mul_ps(e, inv), inv, positive);
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(x, sigmoid), _mm256_loadu_ps(u + i)));
  }
  for (; i < n; ++i) {
    y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

void softmax_row(float* s, int64_t n, int64_t width) {
  const float sum = exp_sum(s, n, row_max(s, n));
  const __m256 inv = _mm256_set1_ps(1.0f / sum);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    _mm256_storeu_ps(s + j, _mm256_mul_ps(_mm256_loadu_ps(s + j), inv));
  }
  for (; j < n; ++j) {
    s[j] *= 1.0f / sum;
  }
  std::fill(s + n, s + width, 0.0f);
}

float logsumexp_row(const float* x, int64_t n) {
  __m256 vmax = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 unordered = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    vmax = _mm256_max_ps(vmax, v);
    unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float top = *std::max_element(lanes, lanes + 8);
  bool nan = _mm256_movemask_ps(unordered) != 0;
  for (; j < n; ++j) {
    nan = nan || std::isnan(x[j]);
    top = std::max(top, x[j]);
  }
  if (nan) {
    return std::numeric_limits<float>::quiet_NaN();
  }
  if (std::isinf(top)) {
    return top; // +inf dominates; all -inf sums to nothing
  }
  return top + std::log(exp_total(x, n, top));
}

} // namespace vmlx::avx2
