// AVX2 + FMA + F16C body of the decode attention (kernels.h: SdpaArgs): compiled with
// -mavx2 -mfma -mf16c (x86-64 only), called only when the CPU has all three (kernels.cpp).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "avx2_math.h"
#include "kernels.h"

namespace vmlx::avx2 {

namespace {

// acc[0:D] += p * v[0:D]
inline void axpy(float* acc, float p, const float* v, int64_t D) {
  const __m256 pv = _mm256_set1_ps(p);
  int64_t d = 0;
  for (; d + 8 <= D; d += 8) {
    _mm256_storeu_ps(acc + d, _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + d), _mm256_loadu_ps(acc + d)));
  }
  for (; d < D; ++d) {
    acc[d] += p * v[d];
  }
}

// dots[r] = q[r] . k over 8 V floats, for n <= 4 query rows sharing each load of k.
template <int V>
inline void row_dots(const float* const* q, int n, const float* k, float* dots) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int j = 0; j < V; ++j) {
    const __m256 kv = _mm256_loadu_ps(k + 8 * j);
    for (int r = 0; r < n; ++r) {
      acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(q[r] + 8 * j), kv, acc[r]);
    }
  }
  for (int r = 0; r < n; ++r) {
    dots[r] = hsum(acc[r]);
  }
}

// out[0 : 8 V] = sum over keys l in [l0, l1) of p[l - l0] * value row l, in registers.
template <int V>
void weighted_sum(const SdpaArgs& a, int64_t b, int64_t hkv, int64_t l0, int64_t l1, const float* p, float* out) {
  __m256 acc[V];
  for (int j = 0; j < V; ++j) {
    acc[j] = _mm256_setzero_ps();
  }
  for (int64_t l = l0; l < l1; ++l) {
    const float* v = sdpa_value(a, b, hkv, l);
    const __m256 w = _mm256_set1_ps(p[l - l0]);
    for (int j = 0; j < V; ++j) {
      acc[j] = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + 8 * j), acc[j]);
    }
  }
  for (int j = 0; j < V; ++j) {
    _mm256_storeu_ps(out + 8 * j, acc[j]);
  }
}

} // namespace

void sdpa_task(const SdpaArgs& a, int64_t b, int64_t hkv, int64_t l0, int64_t l1, float* part) {
  const int64_t group = a.Hq / a.Hkv;
  const int64_t D = a.D;
  const int64_t rows = group * a.Lq;
  const int64_t span = std::max<int64_t>(1, l1 - l0);
  thread_local std::vector<float> scores;
  scores.resize(rows * span);
  // Pass 1: all scores of this key range, each key row read once for every query row.
  thread_local std::vector<int64_t> limit;
  limit.resize(rows);
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t i = row % a.Lq;
    limit[row] = a.causal ? std::min(l1, a.Lk - a.Lq + i + 1) : l1;
  }
  // each row's query and head once, not an integer division per key and row
  thread_local std::vector<const float*> query;
  thread_local std::vector<int64_t> head;
  query.resize(rows);
  head.resize(rows);
  for (int64_t row = 0; row < rows; ++row) {
    head[row] = hkv * group + row / a.Lq;
    query[row] = a.q + b * a.q_strides[0] + head[row] * a.q_strides[1] + (row % a.Lq) * a.q_strides[2];
  }
  const bool unmasked = a.mask == nullptr && a.key_start == nullptr;
  if (unmasked && (D == 64 || D == 128)) { // rows in fours share each key row's loads
    for (int64_t l = l0; l < l1; ++l) {
      const float* k = sdpa_key(a, b, hkv, l);
      for (int64_t row = 0; row < rows; row += 4) {
        const int n = static_cast<int>(std::min<int64_t>(4, rows - row));
        float dots[4];
        if (D == 64) {
          row_dots<8>(query.data() + row, n, k, dots);
        } else {
          row_dots<16>(query.data() + row, n, k, dots);
        }
        for (int r = 0; r < n; ++r) {
          scores[(row + r) * span + (l - l0)] =
              l < limit[row + r] ? dots[r] * a.scale : -std::numeric_limits<float>::infinity();
        }
      }
    }
  } else {
  for (int64_t l = l0; l < l1; ++l) {
    const float* k = sdpa_key(a, b, hkv, l);
    for (int64_t row = 0; row < rows; ++row) {
      scores[row * span + (l - l0)] = l < limit[row] && (unmasked || sdpa_allowed(a, b, head[row], row % a.Lq, l))
          ? dot(query[row], k, D) * a.scale
          : -std::numeric_limits<float>::infinity();
    }
  }
  }
  // Pass 2: softmax numerators, vectorized.
  for (int64_t row = 0; row < rows; ++row) {
    float* out = part + row * (D + 2);
    float* s = scores.data() + row * span;
    const int64_t n = limit[row] - l0;
    if (n <= 0) {
      out[0] = -std::numeric_limits<float>::infinity();
      out[1] = 0.0f;
      std::fill(out + 2, out + 2 + D, 0.0f);
      continue;
    }
    const float max_score = row_max(s, n);
    if (max_score == -std::numeric_limits<float>::infinity()) { // every key masked
      out[0] = max_score;
      out[1] = 0.0f;
      std::fill(out + 2, out + 2 + D, 0.0f);
      limit[row] = l0; // and no value rows in pass 3
      continue;
    }
    const float sum = exp_sum(s, n, max_score);
    out[0] = max_score;
    out[1] = sum;
    std::fill(out + 2, out + 2 + D, 0.0f);
  }
  // Pass 3: weighted sum of the value rows. Head sizes 64 and 128 keep a row's sum in
  // registers over its keys (the task's value rows stay in L2 for the next row);
  // others add into memory, each value row read once for every query row.
  if (D == 64 || D == 128) {
    for (int64_t row = 0; row < rows; ++row) {
      float* out = part + row * (D + 2) + 2;
      const float* p = scores.data() + row * span;
      if (D == 64) {
        weighted_sum<8>(a, b, hkv, l0, limit[row], p, out);
      } else {
        weighted_sum<16>(a, b, hkv, l0, limit[row], p, out);
      }
    }
    return;
  }
  for (int64_t l = l0; l < l1; ++l) {
    const float* v = sdpa_value(a, b, hkv, l);
    for (int64_t row = 0; row < rows; ++row) {
      if (l < limit[row]) {
        axpy(part + row * (D + 2) + 2, scores[row * span + (l - l0)], v, D);
      }
    }
  }
}

} // namespace vmlx::avx2
