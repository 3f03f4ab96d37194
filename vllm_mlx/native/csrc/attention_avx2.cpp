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

// Keys and values are float or uint16_t (half bits, converted 8 at a time by F16C's
// vcvtph2ps): the bodies are templates on that type T, so the float32 path is the same
// code as before.

// acc[0:D] += p * v[0:D]
template <typename T>
inline void axpy(float* acc, float p, const T* v, int64_t D) {
  const __m256 pv = _mm256_set1_ps(p);
  int64_t d = 0;
  for (; d + 8 <= D; d += 8) {
    _mm256_storeu_ps(acc + d, _mm256_fmadd_ps(pv, load8(v + d), _mm256_loadu_ps(acc + d)));
  }
  for (; d < D; ++d) {
    acc[d] += p * scalar(v[d]);
  }
}

// dots[r] = q[r] . k over 8 V floats, for n <= 4 query rows sharing each load of k.
template <int V, typename T>
inline void row_dots(const float* const* q, int n, const T* k, float* dots) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int j = 0; j < V; ++j) {
    const __m256 kv = load8(k + 8 * j);
    for (int r = 0; r < n; ++r) {
      acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(q[r] + 8 * j), kv, acc[r]);
    }
  }
  for (int r = 0; r < n; ++r) {
    dots[r] = hsum(acc[r]);
  }
}

// out[0 : 8 V] = sum over keys l in [l0, l1) of p[l - l0] * value row l, in registers.
template <int V, typename T>
void weighted_sum(const SdpaArgs& a, int64_t b, int64_t hkv, int64_t l0, int64_t l1, const float* p, float* out) {
  __m256 acc[V];
  for (int j = 0; j < V; ++j) {
    acc[j] = _mm256_setzero_ps();
  }
  for (int64_t l = l0; l < l1; ++l) {
    const T* v = sdpa_value<T>(a, b, hkv, l);
    const __m256 w = _mm256_set1_ps(p[l - l0]);
    for (int j = 0; j < V; ++j) {
      acc[j] = _mm256_fmadd_ps(w, load8(v + 8 * j), acc[j]);
    }
  }
  for (int j = 0; j < V; ++j) {
    _mm256_storeu_ps(out + 8 * j, acc[j]);
  }
}

template <typename T>
void sdpa_task_as(const SdpaArgs& a, int64_t b, int64_t hkv, int64_t l0, int64_t l1, float* part) {
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
      const T* k = sdpa_key<T>(a, b, hkv, l);
      for (int64_t row = 0; row < rows; row += 4) {
        const int n = static_cast<int>(std::min<int64_t>(4, rows - row));
        float dots[4];
        if (D == 64) {
          row_dots<8, T>(query.data() + row, n, k, dots);
        } else {
          row_dots<16, T>(query.data() + row, n, k, dots);
        }
        for (int r = 0; r < n; ++r) {
          scores[(row + r) * span + (l - l0)] =
              l < limit[row + r] ? dots[r] * a.scale : -std::numeric_limits<float>::infinity();
        }
      }
    }
  } else {
  for (int64_t l = l0; l < l1; ++l) {
    const T* k = sdpa_key<T>(a, b, hkv, l);
    for (int64_t row = 0; row < rows; ++row) {
      scores[row * span + (l - l0)] = l < limit[row] && (unmasked || sdpa_allowed(a, b, head[row], row % a.Lq, l))
          ? dot(k, query[row], D) * a.scale
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
        weighted_sum<8, T>(a, b, hkv, l0, limit[row], p, out);
      } else {
        weighted_sum<16, T>(a, b, hkv, l0, limit[row], p, out);
      }
    }
    return;
  }
  for (int64_t l = l0; l < l1; ++l) {
    const T* v = sdpa_value<T>(a, b, hkv, l);
    for (int64_t row = 0; row < rows; ++row) {
      if (l < limit[row]) {
        axpy(part + row * (D + 2) + 2, scores[row * span + (l - l0)], v, D);
      }
    }
  }
}

} // namespace

void sdpa_task(const SdpaArgs& a, int64_t b, int64_t hkv, int64_t l0, int64_t l1, float* part) {
  if (a.k_f16 != nullptr) {
    sdpa_task_as<uint16_t>(a, b, hkv, l0, l1, part);
  } else {
    sdpa_task_as<float>(a, b, hkv, l0, l1, part);
  }
}

} // namespace vmlx::avx2
