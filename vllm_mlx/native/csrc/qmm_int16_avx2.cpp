// Decode products (a few rows of x) with x in 16-bit integers (AVX2). The float body
// (kernels_avx2.cpp) turns every weight into a float before its FMA (~16 instructions
// per 32 weights), which held one core to ~5 GB/s of weights where a read loop streams
// ~10-12. Here the weights stay integers: vpmaddwd multiplies 16 of them by x's int16
// values and adds pairs exactly, ~10 instructions per 32 weights with the group's one
// conversion and scale (one core: 6-7 GB/s). The only rounding is x's: x = sx_g * xq,
// |xq| <= 32767 per group (the bound is in kernels.h).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "avx2_math.h"
#include "kernels.h"

namespace vmlx::avx2 {

namespace {

// Two chains (even and odd groups) per output in AVX2's 16 registers: 8 for one row of x
// (four weight rows, enough independent FMA chains to hide their latency), at most 8
// for more rows of x, each weight chunk unpacked once for all of them.
constexpr int weight_rows(int M) {
  return M == 1 ? 4 : M == 2 ? 2 : 1;
}

#include "qmm_int16_body.h"

template <int BITS, int G, int R, int M, typename S>
inline void int_rows_m(const QmmArgs& a, const S* scales, const S* biases, const Int16X* xs, int64_t n, float* buf, int64_t buf_stride) {
  const int64_t groups = a.K / G;
  const int64_t row_bytes = a.K * BITS / 8;
  constexpr int64_t group_bytes = G * BITS / 8;
  constexpr int C = G / 32; // chunks per group
  const uint8_t* w = reinterpret_cast<const uint8_t*>(a.w) + n * row_bytes;
  const int64_t ahead = std::max<int64_t>(R, (PREFETCH_BYTES + row_bytes - 1) / row_bytes) * row_bytes;
  alignas(32) float bias[M][R * 8];
  block_scales<R, M>(scales + n * groups, biases + n * groups, xs, groups, buf, buf_stride, bias);
  __m256 acc[2][R][M]; // the even groups' chain (from the bias lanes), the odd groups'
  for (int r = 0; r < R; ++r) {
    for (int m = 0; m < M; ++m) {
      acc[0][r][m] = _mm256_load_ps(bias[m] + 8 * r);
      acc[1][r][m] = _mm256_setzero_ps();
    }
  }
  const auto group = [&](int64_t g, __m256 (&chain)[R][M]) __attribute__((always_inline)) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = w + r * row_bytes + g * group_bytes;
      _mm_prefetch(reinterpret_cast<const char*>(row + ahead), _MM_HINT_T0);
      __m256i q[C][2];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        unpack16<BITS>(row + c * 32 * BITS / 8, q[c]);
      }
#pragma GCC unroll 4
      for (int m = 0; m < M; ++m) {
        const int16_t* x = xs[m].q + g * G;
        __m256i part = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * c));
          const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * c + 16));
          part = _mm256_add_epi32(part, _mm256_add_epi32(_mm256_madd_epi16(q[c][0], x0), _mm256_madd_epi16(q[c][1], x1)));
        }
        const float* scaled = buf + m * buf_stride + r * groups + g;
        chain[r][m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(part), _mm256_broadcast_ss(scaled), chain[r][m]);
      }
    }
  };
  int64_t g = 0;
  for (; g + 2 <= groups; g += 2) {
    group(g, acc[0]);
    group(g + 1, acc[1]);
  }
  if (g < groups) {
    group(g, acc[0]);
  }
  for (int m = 0; m < M; ++m) {
    for (int r = 0; r < R; ++r) {
      a.y[m * a.N + n + r] = hsum(_mm256_add_ps(acc[0][r][m], acc[1][r][m]));
    }
  }
}

// x's int16 values of groups g, g + 1 (g even) as the VNNI body reads them: per chunk c,
// at 64c of the pair, the two groups' first halves with their dwords (element pairs)
// alternating, then their second halves likewise; an odd last group keeps its order.
void interleave_pairs(int16_t* q, int64_t groups, int group_size) {
  alignas(32) int16_t pair[256];
  for (int64_t g = 0; g + 2 <= groups; g += 2) {
    int16_t* dst = q + g * group_size;
    std::copy(dst, dst + 2 * group_size, pair);
    for (int c = 0; c < group_size; c += 32) {
      for (int half = 0; half < 32; half += 16) {
        for (int l = 0; l < 8; ++l) {
          for (int j = 0; j < 2; ++j) {
            dst[2 * c + 2 * half + 4 * l + j] = pair[c + half + 2 * l + j];
            dst[2 * c + 2 * half + 4 * l + 2 + j] = pair[group_size + c + half + 2 * l + j];
          }
        }
      }
    }
  }
}

} // namespace

bool quantize_int16(const float* x, int64_t K, int group_size, int bits, int levels, XOrder order, Int16X& out) {
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
    const float sx = amax / static_cast<float>(levels);
    for (int r = 0; r < INT16_ROWS; ++r) {
      out.sum[r * groups + g] = sum;
      out.scale[r * groups + g] = sx;
    }
    const __m256 inv = _mm256_set1_ps(sx > 0.0f ? 1.0f / sx : 0.0f);
    int16_t* q = out.q + g * group_size;
    if (bits != 4 || order == XOrder::natural) { // x's own order: 16 at a time, no scratch
      const __m256i low = _mm256_set1_epi32(-levels);
      const __m256i high = _mm256_set1_epi32(levels);
      for (int j = 0; j < group_size; j += 16) {
        const __m256i r0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xg + j), inv));
        const __m256i r1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xg + j + 8), inv));
        const __m256i packed = _mm256_packs_epi32( // in range already: no saturation
            _mm256_min_epi32(_mm256_max_epi32(r0, low), high),
            _mm256_min_epi32(_mm256_max_epi32(r1, low), high));
        // packs interleaves the 128-bit halves (r0 0-3, r1 0-3, r0 4-7, r1 4-7)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + j), _mm256_permute4x64_epi64(packed, 0xD8));
      }
      continue;
    }
    for (int c = 0; c < group_size; c += 32) {
      for (int j = 0; j < 32; j += 8) { // round to nearest even, as MXCSR defaults
        const __m256i r = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xg + c + j), inv));
        _mm256_store_si256(reinterpret_cast<__m256i*>(rounded + j), r);
      }
      for (int j = 0; j < 32; ++j) {
        const int32_t v = rounded[bits == 4 && order != XOrder::natural ? perm4(j) : j];
        q[c + j] = static_cast<int16_t>(std::clamp(v, -levels, levels));
      }
    }
  }
  if (order == XOrder::pairs) {
    interleave_pairs(out.q, groups, group_size);
  }
  return true;
}

void qmm_rows_int16(const QmmArgs& a, const Int16X* xs, int64_t rows, int64_t n0, int64_t n1) {
  const bool f16 = a.scales_f16 != nullptr;
  if (a.bits == 4) {
    f16 ? int_rows_any<4>(a, a.scales_f16, a.biases_f16, xs, rows, n0, n1) : int_rows_any<4>(a, a.scales, a.biases, xs, rows, n0, n1);
  } else {
    f16 ? int_rows_any<8>(a, a.scales_f16, a.biases_f16, xs, rows, n0, n1) : int_rows_any<8>(a, a.scales, a.biases, xs, rows, n0, n1);
  }
}

} // namespace vmlx::avx2
