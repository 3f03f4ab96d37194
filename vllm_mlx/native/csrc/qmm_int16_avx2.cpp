// The decode matrix-vector product with x in 16-bit integers (AVX2). The float body
// (kernels_avx2.cpp) turns every weight into a float before its FMA: ~16 instructions
// per 32 weights, which caps one core at ~5 GB/s while it could stream ~12. Here the
// weights stay integers: vpmaddwd multiplies 16 of them by x's int16 values and adds
// pairs exactly, so a group costs ~7 instructions per 32 weights plus one conversion.
// The only rounding is x's: x = sx_g * xq with |xq| <= 32767 per group (bound in
// kernels.h).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "avx2_math.h"
#include "kernels.h"

namespace vmlx::avx2 {

namespace {

// Element order of a 32-weight chunk of a 4-bit row as unpack16 yields it: the 16 even
// elements (low nibbles), then the 16 odd ones.
inline int perm4(int j) {
  return j < 16 ? 2 * j : 2 * (j - 16) + 1;
}

// Two vectors of 16 int16 weights for the 32 elements from element k of a row.
template <int BITS>
inline void unpack16(const uint8_t* row, int64_t k, __m256i w[2]) {
  if constexpr (BITS == 4) {
    const __m256i bytes = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + k / 2)));
    w[0] = _mm256_and_si256(bytes, _mm256_set1_epi16(0x0F));
    w[1] = _mm256_srli_epi16(bytes, 4);
  } else {
    w[0] = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + k)));
    w[1] = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + k + 16)));
  }
}

inline __m256 load_scales(const float* s) {
  return _mm256_loadu_ps(s);
}

inline __m256 load_scales(const uint16_t* s) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
}

inline float scale_scalar(float s) {
  return s;
}

inline float scale_scalar(uint16_t s) {
  return _cvtsh_ss(s);
}

// out[i] = w_scale[i] * sx[i % groups] for the R rows' groups, and the bias term
// sum_g w_bias[g] * xsum[g] per row: one vector pass over each row's scales.
template <typename S>
inline void row_scales(const S* scales, const S* biases, const float* sx, const float* xsum, int64_t groups, float* out, float* bias_dot) {
  int64_t g = 0;
  __m256 acc = _mm256_setzero_ps();
  for (; g + 8 <= groups; g += 8) {
    _mm256_storeu_ps(out + g, _mm256_mul_ps(load_scales(scales + g), _mm256_loadu_ps(sx + g)));
    acc = _mm256_fmadd_ps(load_scales(biases + g), _mm256_loadu_ps(xsum + g), acc);
  }
  float b = hsum(acc);
  for (; g < groups; ++g) {
    out[g] = scale_scalar(scales[g]) * sx[g];
    b += scale_scalar(biases[g]) * xsum[g];
  }
  *bias_dot = b;
}

// R weight rows at once against one int16 x: each group's integer dot product is exact,
// converted once and scaled by w_scale * sx.
template <int BITS, int R, typename S>
inline void int_rows(const QmmArgs& a, const S* scales, const S* biases, const Int16X& x, int64_t n, float* buf) {
  const int64_t groups = a.K / a.group_size;
  const int64_t row_bytes = a.K * BITS / 8;
  const uint8_t* w = reinterpret_cast<const uint8_t*>(a.w) + n * row_bytes;
  float bias_dot[R];
  for (int r = 0; r < R; ++r) {
    row_scales(scales + (n + r) * groups, biases + (n + r) * groups, x.scale, x.sum, groups, buf + r * groups, bias_dot + r);
  }
  __m256 acc[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm256_setzero_ps();
  }
  for (int64_t g = 0; g < groups; ++g) {
    __m256i part[R];
    for (int r = 0; r < R; ++r) {
      part[r] = _mm256_setzero_si256();
    }
    for (int64_t k = g * a.group_size; k < (g + 1) * a.group_size; k += 32) {
      const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + k));
      const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + k + 16));
      for (int r = 0; r < R; ++r) {
        const uint8_t* row = w + r * row_bytes;
        // the next block of R rows at this offset: with the hardware prefetcher alone one
        // core streams these interleaved rows at ~3.5 GB/s, with this at ~6
        _mm_prefetch(reinterpret_cast<const char*>(row + R * row_bytes + k * BITS / 8), _MM_HINT_T0);
        __m256i q[2];
        unpack16<BITS>(row, k, q);
        part[r] = _mm256_add_epi32(part[r], _mm256_madd_epi16(q[0], x0));
        part[r] = _mm256_add_epi32(part[r], _mm256_madd_epi16(q[1], x1));
      }
    }
    for (int r = 0; r < R; ++r) {
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(part[r]), _mm256_broadcast_ss(buf + r * groups + g), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    a.y[n + r] = hsum(acc[r]) + bias_dot[r];
  }
}

template <int BITS, typename S>
void int_rows_all(const QmmArgs& a, const S* scales, const S* biases, const Int16X& x, int64_t n0, int64_t n1) {
  thread_local std::vector<float> buf;
  buf.resize(4 * (a.K / a.group_size));
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) {
    int_rows<BITS, 4>(a, scales, biases, x, n, buf.data());
  }
  for (; n < n1; ++n) {
    int_rows<BITS, 1>(a, scales, biases, x, n, buf.data());
  }
}

} // namespace

bool quantize_int16(const float* x, int64_t K, int group_size, int bits, Int16X& out) {
  const int64_t groups = K / group_size;
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  alignas(32) int32_t rounded[32];
  for (int64_t g = 0; g < groups; ++g) {
    const float* xg = x + g * group_size;
    __m256 vmax = _mm256_setzero_ps();
    __m256 vsum = _mm256_setzero_ps();
    for (int j = 0; j < group_size; j += 8) {
      const __m256 v = _mm256_loadu_ps(xg + j);
      vsum = _mm256_add_ps(vsum, v);
      vmax = _mm256_max_ps(vmax, _mm256_and_ps(v, magnitude));
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vmax);
    const float amax = *std::max_element(lanes, lanes + 8);
    const float sum = hsum(vsum);
    if (!std::isfinite(amax) || !std::isfinite(sum)) {
      return false; // the float body propagates inf and nan as MLX does
    }
    out.sum[g] = sum;
    const float sx = amax / 32767.0f;
    out.scale[g] = sx;
    const __m256 inv = _mm256_set1_ps(sx > 0.0f ? 1.0f / sx : 0.0f);
    int16_t* q = out.q + g * group_size;
    for (int c = 0; c < group_size; c += 32) {
      for (int j = 0; j < 32; j += 8) { // round to nearest even, as MXCSR defaults
        const __m256i r = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xg + c + j), inv));
        _mm256_store_si256(reinterpret_cast<__m256i*>(rounded + j), r);
      }
      for (int j = 0; j < 32; ++j) {
        const int32_t v = rounded[bits == 4 ? perm4(j) : j];
        q[c + j] = static_cast<int16_t>(std::clamp(v, -32767, 32767));
      }
    }
  }
  return true;
}

void qmm_rows_int16(const QmmArgs& a, const Int16X& x, int64_t n0, int64_t n1) {
  const bool f16 = a.scales_f16 != nullptr;
  if (a.bits == 4) {
    f16 ? int_rows_all<4>(a, a.scales_f16, a.biases_f16, x, n0, n1) : int_rows_all<4>(a, a.scales, a.biases, x, n0, n1);
  } else {
    f16 ? int_rows_all<8>(a, a.scales_f16, a.biases_f16, x, n0, n1) : int_rows_all<8>(a, a.scales, a.biases, x, n0, n1);
  }
}

} // namespace vmlx::avx2
