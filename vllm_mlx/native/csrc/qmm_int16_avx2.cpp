// Decode products (1-8 rows of x) with x in 16-bit integers (AVX2). The float body
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

constexpr int64_t PREFETCH_BYTES = 2048;

// Element order of a 32-weight chunk of a 4-bit row as unpack16 yields it: the 16 even
// elements (low nibbles), then the 16 odd ones.
inline int perm4(int j) {
  return j < 16 ? 2 * j : 2 * (j - 16) + 1;
}

// Two vectors of 16 int16 weights for the 32 elements whose bytes start at p.
template <int BITS>
inline void unpack16(const uint8_t* p, __m256i w[2]) {
  if constexpr (BITS == 4) {
    const __m256i bytes = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    w[0] = _mm256_and_si256(bytes, _mm256_set1_epi16(0x0F));
    w[1] = _mm256_srli_epi16(bytes, 4);
  } else {
    w[0] = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    w[1] = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
  }
}

// For R consecutive rows (their groups are contiguous, as are x's R copies of sx and of
// its group sums): scaled[i] = w_scale[i] * sx[i], and each row's bias term
// sum_g w_bias[g] * xsum[g]. One vector pass instead of a short one per row.
template <int R, typename S>
inline void block_scales(const S* scales, const S* biases, const Int16X& x, int64_t groups, float* scaled, float* bias_dot) {
  const int64_t count = R * groups;
  float* products = scaled + count; // scratch: w_bias * xsum
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm256_storeu_ps(scaled + i, _mm256_mul_ps(load8(scales + i), _mm256_loadu_ps(x.scale + i)));
    _mm256_storeu_ps(products + i, _mm256_mul_ps(load8(biases + i), _mm256_loadu_ps(x.sum + i)));
  }
  for (; i < count; ++i) {
    scaled[i] = scalar(scales[i]) * x.scale[i];
    products[i] = scalar(biases[i]) * x.sum[i];
  }
  // each row's sum of its products: whole vectors, then its last groups masked
  alignas(32) static constexpr int32_t first_lanes[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  const int64_t whole = groups / 8 * 8;
  const __m256i tail = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(first_lanes + 8 - (groups - whole)));
  for (int r = 0; r < R; ++r) {
    const float* p = products + r * groups;
    __m256 sum = _mm256_maskload_ps(p + whole, tail);
    for (int64_t g = 0; g < whole; g += 8) {
      sum = _mm256_add_ps(sum, _mm256_loadu_ps(p + g));
    }
    bias_dot[r] = hsum(sum);
  }
}

// The exact integer dot product of the 32 weights whose bytes start at p with 32 int16
// x values, as 8 int32 lanes.
template <int BITS>
inline __m256i dot32(const uint8_t* p, const int16_t* xq) {
  __m256i q[2];
  unpack16<BITS>(p, q);
  const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
  const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 16));
  return _mm256_add_epi32(_mm256_madd_epi16(q[0], x0), _mm256_madd_epi16(q[1], x1));
}

// R weight rows at once against one int16 x, group size G: each group's integer dot
// product is exact, converted once and scaled by w_scale * sx.
template <int BITS, int G, int R, typename S>
inline void int_rows(const QmmArgs& a, const S* scales, const S* biases, const Int16X& x, int64_t n, float* buf) {
  const int64_t groups = a.K / G;
  const int64_t row_bytes = a.K * BITS / 8;
  constexpr int64_t group_bytes = G * BITS / 8;
  const uint8_t* w = reinterpret_cast<const uint8_t*>(a.w) + n * row_bytes;
  // prefetch the rows ~2 KB on (at least the next block of R) at this offset: with the
  // hardware prefetcher alone one core streams these interleaved rows at ~3.5 GB/s
  const int64_t ahead = std::max<int64_t>(R, (PREFETCH_BYTES + row_bytes - 1) / row_bytes) * row_bytes;
  float bias_dot[R];
  block_scales<R>(scales + n * groups, biases + n * groups, x, groups, buf, bias_dot);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm256_setzero_ps();
  }
  const int16_t* xq = x.q;
  for (int64_t g = 0; g < groups; ++g, xq += G, w += group_bytes) {
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = w + r * row_bytes;
      _mm_prefetch(reinterpret_cast<const char*>(row + ahead), _MM_HINT_T0);
      __m256i part = dot32<BITS>(row, xq);
      for (int c = 1; c < G / 32; ++c) {
        part = _mm256_add_epi32(part, dot32<BITS>(row + c * 32 * BITS / 8, xq + 32 * c));
      }
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(part), _mm256_broadcast_ss(buf + r * groups + g), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    a.y[n + r] = hsum(acc[r]) + bias_dot[r];
  }
}

template <int BITS, int G, typename S>
void int_rows_all(const QmmArgs& a, const S* scales, const S* biases, const Int16X& x, int64_t n0, int64_t n1) {
  thread_local std::vector<float> buf;
  buf.resize(2 * INT16_ROWS * (a.K / G) + 8); // scaled, products (+ a masked tail)
  int64_t n = n0;
  for (; n + INT16_ROWS <= n1; n += INT16_ROWS) {
    int_rows<BITS, G, INT16_ROWS>(a, scales, biases, x, n, buf.data());
  }
  for (; n < n1; ++n) {
    int_rows<BITS, G, 1>(a, scales, biases, x, n, buf.data());
  }
}

template <int BITS, typename S>
void int_rows_any(const QmmArgs& a, const S* scales, const S* biases, const Int16X& x, int64_t n0, int64_t n1) {
  switch (a.group_size) {
    case 32: int_rows_all<BITS, 32>(a, scales, biases, x, n0, n1); break;
    case 64: int_rows_all<BITS, 64>(a, scales, biases, x, n0, n1); break;
    default: int_rows_all<BITS, 128>(a, scales, biases, x, n0, n1); break;
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
    const float sx = amax / 32767.0f;
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
        q[c + j] = static_cast<int16_t>(std::clamp(v, -32767, 32767));
      }
    }
  }
  return true;
}

void qmm_rows_int16(const QmmArgs& a, const Int16X& x, int64_t n0, int64_t n1) {
  const bool f16 = a.scales_f16 != nullptr;
  if (a.bits == 4) {
    f16 ? int_rows_any<4>(a, a.scales_f16, a.biases_f16, x, n0, n1) : int_rows_any<4>(a, a.scales, a.biases, x, n0, n1);
  } else {
    f16 ? int_rows_any<8>(a, a.scales_f16, a.biases_f16, x, n0, n1) : int_rows_any<8>(a, a.scales, a.biases, x, n0, n1);
  }
}

} // namespace vmlx::avx2
