// AVX2 + FMA bodies of the sampler's per-entry passes (sampling.h), compiled with -mavx2
// -mfma -mf16c and called only when the CPU has them (sampling.cpp dispatches).
#include <cmath>
#include <limits>

#include "avx2_math.h"
#include "sampling.h"

namespace vmlx::avx2 {

namespace {

double lanes_sum(__m256d lo, __m256d hi) {
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(lo, hi));
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

} // namespace

double masked_weights(const float* x, float* w, int64_t n, float top, float floor, float inv_temp) {
  const __m256 vtop = _mm256_set1_ps(top);
  const __m256 vfloor = _mm256_set1_ps(floor);
  const __m256 vneg = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  const __m256 vscale = _mm256_set1_ps(inv_temp);
  __m256d lo = _mm256_setzero_pd();
  __m256d hi = _mm256_setzero_pd();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    const __m256 keep = _mm256_and_ps(_mm256_cmp_ps(v, vfloor, _CMP_GE_OQ), _mm256_cmp_ps(v, vneg, _CMP_NEQ_OQ));
    const __m256 e = _mm256_and_ps(exp256(_mm256_mul_ps(_mm256_sub_ps(v, vtop), vscale)), keep);
    _mm256_storeu_ps(w + j, e);
    lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  double sum = lanes_sum(lo, hi);
  for (; j < n; ++j) {
    const bool keep = x[j] >= floor && x[j] != -std::numeric_limits<float>::infinity();
    w[j] = keep ? std::exp((x[j] - top) * inv_temp) : 0.0f;
    sum += w[j];
  }
  return sum;
}

double probabilities(const float* x, float* p, int64_t n, float top) {
  return masked_weights(x, p, n, top, -std::numeric_limits<float>::infinity(), 1.0f);
}

float max_of(const float* x, int64_t n) {
  return row_max(x, n);
}

} // namespace vmlx::avx2
