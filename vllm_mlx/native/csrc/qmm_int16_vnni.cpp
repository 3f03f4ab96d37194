// The int16 decode product on AVX-512 VNNI (compiled with -mavx512f/bw/vl/vnni; chosen at
// run time where the CPU has them). Same arithmetic as the AVX2 body, so the same bits,
// with each 512-bit vector serving two groups at once: its even dwords are group g's 8
// lanes, its odd ones group g + 1's (x is laid out so, quantize_int16's pairs; the
// weights are brought to it by one vpermd as they are unpacked), so per pair of groups
// and (weight row, x row) one vpmaddwd + vpdpwssd forms both groups' exact integer lane
// sums, one conversion and one fma with the two groups' scales (a 64-bit broadcast) add
// them to the even and odd chains: 4 instructions per 64 weights where 256-bit vectors
// took 8. The sums of 16 outputs' chains are formed together (sums), and each chain's
// bias term is where its even chain starts, so no per-output horizontal sums remain.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels.h"

namespace vmlx::vnni {

namespace {

// This file's own copy of the AVX2 helpers (hsum, load8, scalar), in an anonymous
// namespace: the copies compiled here may use AVX-512 encodings, and as shared inline
// functions the linker could let them stand in for the AVX2 files' on a CPU without it.
#include "avx2_math.h"
using namespace vmlx::avx2; // the copy above: the nearest `vmlx` is the one just declared
using ::vmlx::QmmArgs;
using ::vmlx::avx2::INT16_ROWS;
using ::vmlx::avx2::Int16X;

// Passes of 4 rows of x (X_BLOCK) and 4 weight rows: 16 accumulators, the unpacked
// weights and x beside them in the 32 registers. Passes of 8 rows of x (2 weight rows,
// the task's weights read once) measured ~15% slower a batch of 8: the per-(weight row,
// x row) scale and bias work (block_scales, the sums) is then shared by 2 weight rows.
constexpr int weight_rows(int) {
  return 4;
}

#include "qmm_int16_body.h"

template <int64_t GAP>
inline __m256i two_halves(const uint8_t* lo) { // 16 bytes at lo, 16 at lo + GAP
  if constexpr (GAP == 16) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo));
  } else {
    const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(lo + GAP));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lo))), hi, 1);
  }
}

// Chunk c's 32-weight halves of groups g and g + 1 (bytes at p and p + group_bytes), as
// the two vectors vpmaddwd and vpdpwssd take: group g's unpack16 dwords in the even
// lanes, group g + 1's in the odd ones.
template <int BITS, int64_t GROUP_BYTES>
inline void unpack_pair(const uint8_t* p, __m512i w[2]) {
  const __m512i alternate = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  if constexpr (BITS == 4) {
    const __m512i words = _mm512_permutexvar_epi32(alternate, _mm512_cvtepu8_epi16(two_halves<GROUP_BYTES>(p)));
    w[0] = _mm512_and_si512(words, _mm512_set1_epi16(0x0F));
    w[1] = _mm512_srli_epi16(words, 4);
  } else {
    w[0] = _mm512_permutexvar_epi32(alternate, _mm512_cvtepu8_epi16(two_halves<GROUP_BYTES>(p)));
    w[1] = _mm512_permutexvar_epi32(alternate, _mm512_cvtepu8_epi16(two_halves<GROUP_BYTES>(p + 16)));
  }
}

// The two groups' scales (adjacent floats) in the even and the odd lanes.
inline __m512 pair_scales(const float* scaled) {
  double two;
  std::memcpy(&two, scaled, sizeof two);
  return _mm512_castpd_ps(_mm512_set1_pd(two));
}

// Per 128-bit block j: a's p_2j, p_2j+1, then b's, where p_l = z[2l] + z[2l + 1] (the
// even chain's lane l plus the odd one's).
inline __m512 pair_sums(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

// The sums of COUNT (<= 16) outputs' chains at once, with hsum's adds for each (p_l, then
// p_k + p_k+4, then their lanes 0 + 2 and 1 + 3, then those two): y[i] for z[i].
template <int COUNT>
inline void sums(const __m512* z, float* y) {
  static_assert(COUNT <= 16);
  __m512 in[16];
  for (int i = 0; i < 16; ++i) {
    in[i] = i < COUNT ? z[i] : _mm512_setzero_ps();
  }
  __m512 p[8], q[4], r[2];
  for (int i = 0; i < 8; ++i) {
    p[i] = pair_sums(in[2 * i], in[2 * i + 1]); // outputs 2i, 2i + 1
  }
  for (int i = 0; i < 4; ++i) { // blocks: 2i's q0 q1 and 2i+1's, their q2 q3, then 2i+2's and 2i+3's
    const __m512 low = _mm512_shuffle_f32x4(p[2 * i], p[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 high = _mm512_shuffle_f32x4(p[2 * i], p[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2));
    q[i] = _mm512_add_ps(low, high);
  }
  for (int i = 0; i < 2; ++i) { // block j: outputs 8i + 2j, 8i + 2j + 1, each r0 r1
    const __m512 first = _mm512_shuffle_f32x4(q[2 * i], q[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 second = _mm512_shuffle_f32x4(q[2 * i], q[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1));
    r[i] = _mm512_add_ps(first, second);
  }
  // block j: outputs 2j, 2j + 1, 8 + 2j, 9 + 2j; then in order
  const __m512 out = _mm512_add_ps(_mm512_shuffle_ps(r[0], r[1], _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(r[0], r[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  _mm512_store_ps(y, _mm512_permutexvar_ps(order, out));
}

template <int BITS, int G, int R, int M, typename S>
inline void int_rows_m(const QmmArgs& a, const S* scales, const S* biases, const Int16X* xs, int64_t n, float* buf, int64_t buf_stride) {
  const int64_t groups = a.K / G;
  const int64_t row_bytes = a.K * BITS / 8;
  constexpr int64_t group_bytes = G * BITS / 8;
  constexpr int C = G / 32; // chunks per group
  constexpr int64_t chunk_bytes = 32 * BITS / 8;
  const uint8_t* w = reinterpret_cast<const uint8_t*>(a.w) + n * row_bytes;
  const int64_t ahead = std::max<int64_t>(R, (PREFETCH_BYTES + row_bytes - 1) / row_bytes) * row_bytes;
  alignas(32) float bias[M][R * 8];
  block_scales<R, M>(scales + n * groups, biases + n * groups, xs, groups, buf, buf_stride, bias);
  __m512 acc[R][M]; // the even chain from the bias lanes (lane l to 2l), the odd from 0
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      acc[r][m] = _mm512_castsi512_ps(_mm512_cvtepu32_epi64(_mm256_castps_si256(_mm256_load_ps(bias[m] + 8 * r))));
    }
  }
  int64_t g = 0;
  for (; g + 2 <= groups; g += 2) {
    if constexpr (C == 1) { // every weight row unpacked, then each x row loaded once
      __m512i q[R][2];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const uint8_t* row = w + r * row_bytes + g * group_bytes;
#pragma GCC unroll 2
        for (int64_t off = 0; off < 2 * group_bytes; off += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(row + ahead + off), _MM_HINT_T0);
        }
        unpack_pair<BITS, group_bytes>(row, q[r]);
      }
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) {
        const int16_t* x = xs[m].q + g * G;
        const __m512i x0 = _mm512_loadu_si512(x);
        const __m512i x1 = _mm512_loadu_si512(x + 32);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const __m512i part = _mm512_dpwssd_epi32(_mm512_madd_epi16(q[r][0], x0), q[r][1], x1);
          const __m512 s = pair_scales(buf + m * buf_stride + r * groups + g);
          acc[r][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(part), s, acc[r][m]);
        }
      }
    } else {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const uint8_t* row = w + r * row_bytes + g * group_bytes;
#pragma GCC unroll 8
        for (int64_t off = 0; off < 2 * group_bytes; off += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(row + ahead + off), _MM_HINT_T0);
        }
        __m512i q[C][2];
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          unpack_pair<BITS, group_bytes>(row + c * chunk_bytes, q[c]);
        }
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
          const int16_t* x = xs[m].q + g * G;
          __m512i part = _mm512_madd_epi16(q[0][0], _mm512_loadu_si512(x));
          part = _mm512_dpwssd_epi32(part, q[0][1], _mm512_loadu_si512(x + 32));
#pragma GCC unroll 4
          for (int c = 1; c < C; ++c) {
            part = _mm512_dpwssd_epi32(part, q[c][0], _mm512_loadu_si512(x + 64 * c));
            part = _mm512_dpwssd_epi32(part, q[c][1], _mm512_loadu_si512(x + 64 * c + 32));
          }
          const __m512 s = pair_scales(buf + m * buf_stride + r * groups + g);
          acc[r][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(part), s, acc[r][m]);
        }
      }
    }
  }
  if (g < groups) { // an odd last group, in x's own order: the even chains alone
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = w + r * row_bytes + g * group_bytes;
      __m256i q[C][2];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        unpack16<BITS>(row + c * chunk_bytes, q[c]);
      }
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) {
        const int16_t* x = xs[m].q + g * G;
        __m256i part = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          part = _mm256_dpwssd_epi32(part, q[c][0], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * c)));
          part = _mm256_dpwssd_epi32(part, q[c][1], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * c + 16)));
        }
        const __m512 lanes = _mm512_cvtepi32_ps(_mm512_cvtepu32_epi64(part)); // lane l to 2l
        const __m512 s = _mm512_set1_ps(buf[m * buf_stride + r * groups + g]);
        acc[r][m] = _mm512_mask3_fmadd_ps(lanes, s, acc[r][m], 0x5555);
      }
    }
  }
  alignas(64) float y[16];
  sums<R * M>(&acc[0][0], y);
  for (int m = 0; m < M; ++m) {
    for (int r = 0; r < R; ++r) {
      a.y[m * a.N + n + r] = y[r * M + m];
    }
  }
}

template <typename S>
void rows_any(const QmmArgs& a, const S* scales, const S* biases, const Int16X* xs, int64_t rows, int64_t n0, int64_t n1) {
  a.bits == 4 ? int_rows_any<4>(a, scales, biases, xs, rows, n0, n1) : int_rows_any<8>(a, scales, biases, xs, rows, n0, n1);
}

} // namespace

bool supported() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

void qmm_rows_int16(const QmmArgs& a, const Int16X* xs, int64_t rows, int64_t n0, int64_t n1) {
  a.scales_f16 != nullptr ? rows_any(a, a.scales_f16, a.biases_f16, xs, rows, n0, n1) : rows_any(a, a.scales, a.biases, xs, rows, n0, n1);
}

} // namespace vmlx::vnni
