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

#define VMLX_INT16_X_BLOCK 4 // rows of x a pass over the weights serves

// Four weight rows a pass as for one row of x: fewer left the FMA chains too short to
// hide their latency, and blocks of more than four rows of x gained nothing more here
// (16 accumulators fill AVX2's 16 registers).
constexpr int weight_rows(int) {
  return 4;
}

inline __m256i dot32(const __m256i q[2], __m256i x0, __m256i x1) {
  return _mm256_add_epi32(_mm256_madd_epi16(q[0], x0), _mm256_madd_epi16(q[1], x1));
}

constexpr bool X_OUTER = false; // 16 registers: the weight-row-outer order spills less

#include "qmm_int16_body.h"

// The element at byte p of a 32-weight chunk as the VNNI int8 body lays out 8-bit weights
// (4-bit ones keep element order): dword l holds the elements 2l, 2l+1, 16 + 2l, 17 + 2l.
inline int perm8_bytes(int p) {
  return (p % 4 < 2 ? 0 : 16) + 2 * (p / 4) + p % 2;
}

} // namespace

bool quantize_int16(const float* x, int64_t K, int group_size, int bits, int levels, Int16X& out) {
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
    for (int c = 0; c < group_size; c += 32) {
      for (int j = 0; j < 32; j += 8) { // round to nearest even, as MXCSR defaults
        const __m256i r = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xg + c + j), inv));
        _mm256_store_si256(reinterpret_cast<__m256i*>(rounded + j), r);
      }
      for (int j = 0; j < 32; ++j) {
        const int32_t v = rounded[bits == 4 ? perm4(j) : j];
        q[c + j] = static_cast<int16_t>(std::clamp(v, -levels, levels));
      }
      if (out.q8 != nullptr) {
        int8_t* q8 = out.q8 + g * group_size + c;
        for (int j = 0; j < 32; ++j) {
          q8[j] = static_cast<int8_t>(std::clamp(rounded[bits == 4 ? j : perm8_bytes(j)], -levels, levels));
        }
      }
    }
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
