// AVX2 + FMA + F16C bodies: this file is compiled with -mavx2 -mfma -mf16c (x86-64
// only) and called only when the CPU reports all three at run time (kernels.cpp).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "avx2_math.h"
#include "kernels.h"

namespace vmlx::avx2 {

namespace {

// Scales and biases are float or uint16_t (half bits, F16C); the kernels are templates on
// that type S, so the float32 path is the same code as before.
inline __m256 broadcast(const float* p) {
  return _mm256_broadcast_ss(p);
}

inline __m256 broadcast(const uint16_t* p) {
  return _mm256_set1_ps(_cvtsh_ss(*p));
}

// `count` scales as floats: float ones in place; half ones converted into buf (8 per
// vcvtph2ps), so the hot loops broadcast a float from L1 either way instead of
// converting one half per group (4-12% slower in cache).
inline const float* as_floats(const float* s, int64_t, float*) {
  return s;
}

inline const float* as_floats(const uint16_t* s, int64_t count, float* buf) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm256_storeu_ps(buf + i, load8(s + i));
  }
  for (; i < count; ++i) {
    buf[i] = _cvtsh_ss(s[i]);
  }
  return buf;
}

// The scales and biases of a projection as S pointers (the f16 ones when set).
template <typename S>
inline const S* scales_of(const QmmArgs& a);
template <>
inline const float* scales_of<float>(const QmmArgs& a) {
  return a.scales;
}
template <>
inline const uint16_t* scales_of<uint16_t>(const QmmArgs& a) {
  return a.scales_f16;
}
template <typename S>
inline const S* biases_of(const QmmArgs& a);
template <>
inline const float* biases_of<float>(const QmmArgs& a) {
  return a.biases;
}
template <>
inline const uint16_t* biases_of<uint16_t>(const QmmArgs& a) {
  return a.biases_f16;
}

inline __m256 bytes_to_float(__m128i bytes) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
}

// Four vectors of 8 weights for the 32 elements from element k of a row. 4-bit: the
// even then the odd elements of each half (x is permuted to match); 8-bit: in order.
template <int BITS>
inline void unpack32(const uint8_t* row, int64_t k, __m256 w[4]) {
  if constexpr (BITS == 4) { // byte j holds elements 2j (low nibble) and 2j + 1
    const __m256i mask = _mm256_set1_epi32(0x0F);
    __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + k / 2));
    __m256i b0 = _mm256_cvtepu8_epi32(bytes);
    __m256i b1 = _mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8));
    w[0] = _mm256_cvtepi32_ps(_mm256_and_si256(b0, mask)); // elements 0, 2, .., 14
    w[1] = _mm256_cvtepi32_ps(_mm256_srli_epi32(b0, 4)); // 1, 3, .., 15
    w[2] = _mm256_cvtepi32_ps(_mm256_and_si256(b1, mask)); // 16, 18, .., 30
    w[3] = _mm256_cvtepi32_ps(_mm256_srli_epi32(b1, 4)); // 17, 19, .., 31
  } else {
    __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + k));
    __m128i b1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + k + 16));
    w[0] = bytes_to_float(b0);
    w[1] = bytes_to_float(_mm_srli_si128(b0, 8));
    w[2] = bytes_to_float(b1);
    w[3] = bytes_to_float(_mm_srli_si128(b1, 8));
  }
}

template <int BITS>
inline void load32(const uint8_t* row, int64_t k, __m256 scale, __m256 w[4]) {
  unpack32<BITS>(row, k, w);
  for (int j = 0; j < 4; ++j) {
    w[j] = _mm256_mul_ps(w[j], scale);
  }
}

// One weight row against MT rows of x: out[m] = sum_k q_k * scale_g(k) * x[m][k].
// Several accumulators per row of x hide the FMA latency when MT is small.
template <int BITS, int MT>
inline void row_dot(
    const float* x,
    int64_t K,
    const uint8_t* row,
    const float* scales,
    int group_size,
    float* out) {
  constexpr int A = MT <= 2 ? 4 : (MT <= 4 ? 2 : 1);
  __m256 acc[MT][A];
  for (int m = 0; m < MT; ++m) {
    for (int j = 0; j < A; ++j) {
      acc[m][j] = _mm256_setzero_ps();
    }
  }
  const int64_t groups = K / group_size;
  for (int64_t g = 0; g < groups; ++g) {
    const __m256 scale = _mm256_broadcast_ss(scales + g);
    for (int64_t k = g * group_size; k < (g + 1) * group_size; k += 32) {
      __m256 w[4];
      load32<BITS>(row, k, scale, w);
      for (int m = 0; m < MT; ++m) {
        const float* xm = x + m * K + k;
        for (int j = 0; j < 4; ++j) {
          acc[m][j % A] = _mm256_fmadd_ps(w[j], _mm256_loadu_ps(xm + 8 * j), acc[m][j % A]);
        }
      }
    }
  }
  for (int m = 0; m < MT; ++m) {
    __m256 total = acc[m][0];
    for (int j = 1; j < A; ++j) {
      total = _mm256_add_ps(total, acc[m][j]);
    }
    out[m] = hsum(total);
  }
}

template <int BITS, int MT, typename S>
void rows_tile(
    const QmmArgs& a,
    const float* x,
    const float* xsum,
    int64_t m0,
    int64_t n0,
    int64_t n1) {
  const int64_t groups = a.K / a.group_size;
  const int64_t row_bytes = a.K * BITS / 8;
  const uint8_t* w = reinterpret_cast<const uint8_t*>(a.w);
  float dots[MT];
  thread_local std::vector<float> buf;
  buf.resize(groups);
  for (int64_t n = n0; n < n1; ++n) {
    const float* scales = as_floats(scales_of<S>(a) + n * groups, groups, buf.data());
    row_dot<BITS, MT>(x + m0 * a.K, a.K, w + n * row_bytes, scales, a.group_size, dots);
    const S* brow = biases_of<S>(a) + n * groups;
    for (int m = 0; m < MT; ++m) {
      a.y[(m0 + m) * a.N + n] = dots[m] + dot(brow, xsum + (m0 + m) * groups, groups);
    }
  }
}

// Decode (one row of x): R weight rows at once share every load of x, and each group's
// dot product q.x is summed first and scaled once (one multiply per group, not per
// weight); R independent accumulator chains hide the FMA latency.
template <int BITS, int R, typename S>
inline void vector_rows(
    const QmmArgs& a,
    const float* x,
    const float* xsum,
    int64_t n,
    float* buf) {
  const int64_t groups = a.K / a.group_size;
  const int64_t row_bytes = a.K * BITS / 8;
  const uint8_t* w = reinterpret_cast<const uint8_t*>(a.w) + n * row_bytes;
  // the R rows' scales are contiguous: one conversion pass for all of them
  const float* scales = as_floats(scales_of<S>(a) + n * groups, R * groups, buf);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm256_setzero_ps();
  }
  for (int64_t g = 0; g < groups; ++g) {
    __m256 part[R];
    for (int r = 0; r < R; ++r) {
      part[r] = _mm256_setzero_ps();
    }
    for (int64_t k = g * a.group_size; k < (g + 1) * a.group_size; k += 32) {
      const __m256 x0 = _mm256_loadu_ps(x + k);
      const __m256 x1 = _mm256_loadu_ps(x + k + 8);
      const __m256 x2 = _mm256_loadu_ps(x + k + 16);
      const __m256 x3 = _mm256_loadu_ps(x + k + 24);
      for (int r = 0; r < R; ++r) {
        __m256 q[4];
        // the next block of R rows (see qmm_int16_avx2.cpp)
        _mm_prefetch(reinterpret_cast<const char*>(w + (r + R) * row_bytes + k * BITS / 8), _MM_HINT_T0);
        unpack32<BITS>(w + r * row_bytes, k, q);
        part[r] = _mm256_fmadd_ps(q[0], x0, part[r]);
        part[r] = _mm256_fmadd_ps(q[1], x1, part[r]);
        part[r] = _mm256_fmadd_ps(q[2], x2, part[r]);
        part[r] = _mm256_fmadd_ps(q[3], x3, part[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      acc[r] = _mm256_fmadd_ps(part[r], _mm256_broadcast_ss(scales + r * groups + g), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    a.y[n + r] = hsum(acc[r]) + dot(biases_of<S>(a) + (n + r) * groups, xsum, groups);
  }
}

template <int BITS, typename S>
void rows(const QmmArgs& a, const float* x, const float* xsum, int64_t n0, int64_t n1) {
  if (a.M == 1) {
    thread_local std::vector<float> buf;
    buf.resize(4 * (a.K / a.group_size));
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4) {
      vector_rows<BITS, 4, S>(a, x, xsum, n, buf.data());
    }
    for (; n < n1; ++n) {
      vector_rows<BITS, 1, S>(a, x, xsum, n, buf.data());
    }
    return;
  }
  constexpr int TILE = 8;
  int64_t m0 = 0;
  for (; m0 + TILE <= a.M; m0 += TILE) {
    rows_tile<BITS, TILE, S>(a, x, xsum, m0, n0, n1);
  }
  switch (a.M - m0) {
    case 0: break;
    case 1: rows_tile<BITS, 1, S>(a, x, xsum, m0, n0, n1); break;
    case 2: rows_tile<BITS, 2, S>(a, x, xsum, m0, n0, n1); break;
    case 3: rows_tile<BITS, 3, S>(a, x, xsum, m0, n0, n1); break;
    case 4: rows_tile<BITS, 4, S>(a, x, xsum, m0, n0, n1); break;
    case 5: rows_tile<BITS, 5, S>(a, x, xsum, m0, n0, n1); break;
    case 6: rows_tile<BITS, 6, S>(a, x, xsum, m0, n0, n1); break;
    default: rows_tile<BITS, 7, S>(a, x, xsum, m0, n0, n1); break;
  }
}

} // namespace

void qmm_rows(const QmmArgs& a, const float* x_perm, const float* xsum, int64_t n0, int64_t n1) {
  const bool f16 = a.scales_f16 != nullptr;
  if (a.bits == 4) {
    f16 ? rows<4, uint16_t>(a, x_perm, xsum, n0, n1) : rows<4, float>(a, x_perm, xsum, n0, n1);
  } else {
    f16 ? rows<8, uint16_t>(a, a.x, xsum, n0, n1) : rows<8, float>(a, a.x, xsum, n0, n1);
  }
}

namespace {

template <typename S>
void dequantize_rows_as(const QmmArgs& a, int64_t n0, int64_t n1) {
  const S* scales = scales_of<S>(a);
  const S* biases = biases_of<S>(a);
  const int64_t groups = a.K / a.group_size;
  const int64_t row_bytes = a.K * a.bits / 8;
  const uint8_t* w = reinterpret_cast<const uint8_t*>(a.w);
  const __m128i mask = _mm_set1_epi8(0x0F);
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w + n * row_bytes;
    float* out = a.y + n * a.K;
    for (int64_t g = 0; g < groups; ++g) {
      const __m256 scale = broadcast(scales + n * groups + g);
      const __m256 bias = broadcast(biases + n * groups + g);
      for (int64_t k = g * a.group_size; k < (g + 1) * a.group_size; k += 32) {
        __m128i e0, e1;
        if (a.bits == 4) { // interleave low/high nibbles back into element order
          __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + k / 2));
          __m128i lo = _mm_and_si128(bytes, mask);
          __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
          e0 = _mm_unpacklo_epi8(lo, hi);
          e1 = _mm_unpackhi_epi8(lo, hi);
        } else {
          e0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + k));
          e1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + k + 16));
        }
        _mm256_storeu_ps(out + k, _mm256_fmadd_ps(bytes_to_float(e0), scale, bias));
        _mm256_storeu_ps(out + k + 8, _mm256_fmadd_ps(bytes_to_float(_mm_srli_si128(e0, 8)), scale, bias));
        _mm256_storeu_ps(out + k + 16, _mm256_fmadd_ps(bytes_to_float(e1), scale, bias));
        _mm256_storeu_ps(out + k + 24, _mm256_fmadd_ps(bytes_to_float(_mm_srli_si128(e1, 8)), scale, bias));
      }
    }
  }
}

} // namespace

void dequantize_rows(const QmmArgs& a, int64_t n0, int64_t n1) {
  if (a.scales_f16 != nullptr) {
    dequantize_rows_as<uint16_t>(a, n0, n1);
  } else {
    dequantize_rows_as<float>(a, n0, n1);
  }
}

void to_halves(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
  }
  for (; i < n; ++i) {
    y[i] = float_to_half(x[i]);
  }
}

} // namespace vmlx::avx2
