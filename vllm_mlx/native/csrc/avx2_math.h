// AVX2 + FMA + F16C vector math shared by the kernel bodies: include only from files
// compiled with -mavx2 -mfma -mf16c (kernels_avx2.cpp, attention_avx2.cpp, fused_avx2.cpp).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace vmlx::avx2 {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Eight floats from float or uint16_t (IEEE half bits, F16C) storage: the kernels are
// templates on that element type, so their float32 path is the same code as before.
inline __m256 load8(const float* p) {
  return _mm256_loadu_ps(p);
}

inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

inline float scalar(float s) {
  return s;
}

inline float scalar(uint16_t s) {
  return _cvtsh_ss(s);
}

template <typename S>
inline float dot(const S* a, const float* b, int64_t D) {
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 16 <= D; d += 16) {
    acc0 = _mm256_fmadd_ps(load8(a + d), _mm256_loadu_ps(b + d), acc0);
    acc1 = _mm256_fmadd_ps(load8(a + d + 8), _mm256_loadu_ps(b + d + 8), acc1);
  }
  float s = hsum(_mm256_add_ps(acc0, acc1));
  for (; d < D; ++d) {
    s += scalar(a[d]) * b[d];
  }
  return s;
}

// exp(x) for x <= 0 (softmax after subtracting the max): Cephes-style range
// reduction x = n ln2 + r and a degree-6 polynomial, max relative error ~2e-7.
inline __m256 exp256(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3f);
  x = _mm256_max_ps(x, lo);
  const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
  const __m256 ln2_hi = _mm256_set1_ps(0.693359375f);
  const __m256 ln2_lo = _mm256_set1_ps(-2.12194440e-4f);
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, ln2_hi, x);
  r = _mm256_fnmadd_ps(n, ln2_lo, r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// max(s[0, n)), -inf for n == 0.
inline float row_max(const float* s, int64_t n) {
  __m256 vmax = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(s + j));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float max_score = *std::max_element(lanes, lanes + 8);
  for (; j < n; ++j) {
    max_score = std::max(max_score, s[j]);
  }
  return max_score;
}

// sum of exp(s[j] - max_score) over [0, n); STORE also writes each term to out[j].
template <bool STORE>
inline float exp_terms(const float* s, float* out, int64_t n, float max_score) {
  const __m256 vm = _mm256_set1_ps(max_score);
  __m256 vsum = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
    if constexpr (STORE) {
      _mm256_storeu_ps(out + j, e);
    }
    vsum = _mm256_add_ps(vsum, e);
  }
  float sum = hsum(vsum);
  for (; j < n; ++j) {
    const float e = std::exp(s[j] - max_score);
    if constexpr (STORE) {
      out[j] = e;
    }
    sum += e;
  }
  return sum;
}

// s[j] = exp(s[j] - max_score) over [0, n), in place; returns their sum (softmax numerators).
inline float exp_sum(float* s, int64_t n, float max_score) {
  return exp_terms<true>(s, s, n, max_score);
}

// sum of exp(s[j] - max_score) over [0, n), s unchanged.
inline float exp_total(const float* s, int64_t n, float max_score) {
  return exp_terms<false>(s, nullptr, n, max_score);
}

} // namespace vmlx::avx2
