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

constexpr int64_t PREFETCH_BYTES = 2048;
constexpr int64_t X_BLOCK = 4; // rows of x a pass over the weights serves

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

// R weight rows against M rows of x at once (a batch's decode rows): each weight chunk is
// read and unpacked once for all M rows (measured here: a row of a 4-row block costs
// ~0.75 of a row alone; the products, not the reads, are most of a row's work). Every
// (x row, weight row) output has the one-row arithmetic exactly: the exact integer dot
// per group, its scaled fma into the same 8 lanes in group order, the same sums after;
// so a row's numbers depend neither on M, R nor on its neighbours.
template <int BITS, int G, int R, int M, typename S>
inline void int_rows_m(const QmmArgs& a, const S* scales, const S* biases, const Int16X* xs, int64_t n, float* buf, int64_t buf_stride) {
  const int64_t groups = a.K / G;
  const int64_t row_bytes = a.K * BITS / 8;
  constexpr int64_t group_bytes = G * BITS / 8;
  constexpr int C = G / 32; // chunks per group
  const uint8_t* w = reinterpret_cast<const uint8_t*>(a.w) + n * row_bytes;
  const int64_t ahead = std::max<int64_t>(R, (PREFETCH_BYTES + row_bytes - 1) / row_bytes) * row_bytes;
  float bias_dot[M][R];
  for (int m = 0; m < M; ++m) {
    block_scales<R>(scales + n * groups, biases + n * groups, xs[m], groups, buf + m * buf_stride, bias_dot[m]);
  }
  __m256 acc[R][M];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      acc[r][m] = _mm256_setzero_ps();
    }
  }
  for (int64_t g = 0; g < groups; ++g, w += group_bytes) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = w + r * row_bytes;
      _mm_prefetch(reinterpret_cast<const char*>(row + ahead), _MM_HINT_T0);
      __m256i q[C][2];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        unpack16<BITS>(row + c * 32 * BITS / 8, q[c]);
      }
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) {
        const int16_t* xq = xs[m].q + g * G;
        __m256i part = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32 * c));
          const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32 * c + 16));
          const __m256i d = _mm256_add_epi32(_mm256_madd_epi16(q[c][0], x0), _mm256_madd_epi16(q[c][1], x1));
          part = c == 0 ? d : _mm256_add_epi32(part, d);
        }
        const float* scaled = buf + m * buf_stride + r * groups + g;
        acc[r][m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(part), _mm256_broadcast_ss(scaled), acc[r][m]);
      }
    }
  }
  for (int m = 0; m < M; ++m) {
    for (int r = 0; r < R; ++r) {
      a.y[m * a.N + n + r] = hsum(acc[r][m]) + bias_dot[m][r];
    }
  }
}

// Weight rows [n0, n1) for M (1..4) rows of x; y row m at a.y + m * a.N. Four weight
// rows a pass as for one row of x: fewer left the FMA chains too short to hide their
// latency, and blocks of more than four rows of x gained nothing more here.
template <int BITS, int G, int M, typename S>
void int_rows_block(const QmmArgs& a, const S* scales, const S* biases, const Int16X* xs, int64_t n0, int64_t n1) {
  const int64_t stride = 2 * INT16_ROWS * (a.K / G) + 8; // scaled, products (+ a masked tail)
  thread_local std::vector<float> buf;
  buf.resize(M * stride);
  int64_t n = n0;
  for (; n + INT16_ROWS <= n1; n += INT16_ROWS) {
    int_rows_m<BITS, G, INT16_ROWS, M>(a, scales, biases, xs, n, buf.data(), stride);
  }
  for (; n < n1; ++n) {
    int_rows_m<BITS, G, 1, M>(a, scales, biases, xs, n, buf.data(), stride);
  }
}

template <int BITS, int G, typename S>
void int_rows_all(const QmmArgs& a, const S* scales, const S* biases, const Int16X* xs, int64_t rows, int64_t n0, int64_t n1) {
  QmmArgs block = a;
  for (int64_t m = 0; m < rows; m += X_BLOCK, block.y += X_BLOCK * a.N) {
    const Int16X* x = xs + m;
    switch (std::min<int64_t>(X_BLOCK, rows - m)) {
      case 1: int_rows_block<BITS, G, 1>(block, scales, biases, x, n0, n1); break;
      case 2: int_rows_block<BITS, G, 2>(block, scales, biases, x, n0, n1); break;
      case 3: int_rows_block<BITS, G, 3>(block, scales, biases, x, n0, n1); break;
      default: int_rows_block<BITS, G, 4>(block, scales, biases, x, n0, n1); break;
    }
  }
}

template <int BITS, typename S>
void int_rows_any(const QmmArgs& a, const S* scales, const S* biases, const Int16X* xs, int64_t rows, int64_t n0, int64_t n1) {
  switch (a.group_size) {
    case 32: int_rows_all<BITS, 32>(a, scales, biases, xs, rows, n0, n1); break;
    case 64: int_rows_all<BITS, 64>(a, scales, biases, xs, rows, n0, n1); break;
    default: int_rows_all<BITS, 128>(a, scales, biases, xs, rows, n0, n1); break;
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

void qmm_rows_int16(const QmmArgs& a, const Int16X* xs, int64_t rows, int64_t n0, int64_t n1) {
  const bool f16 = a.scales_f16 != nullptr;
  if (a.bits == 4) {
    f16 ? int_rows_any<4>(a, a.scales_f16, a.biases_f16, xs, rows, n0, n1) : int_rows_any<4>(a, a.scales, a.biases, xs, rows, n0, n1);
  } else {
    f16 ? int_rows_any<8>(a, a.scales_f16, a.biases_f16, xs, rows, n0, n1) : int_rows_any<8>(a, a.scales, a.biases, xs, rows, n0, n1);
  }
}

} // namespace vmlx::avx2
