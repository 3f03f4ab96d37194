// The int16 decode product on weights repacked for AVX-512 (packed_weights.cpp): a
// vector's 16 dword lanes are 16 consecutive weight rows, each dword two consecutive
// weights of its row as int16 once unpacked (4 bits: one and / shift + and per pair
// vector, 8 bits: one and or one shift), so one vpdpwssd with x's int16 pair broadcast
// does 32 multiply-adds for 16 outputs, no horizontal sums. Per group and x row: the 16
// rows' exact integer dots, converted once and fma'd with (w_scale * sx) and then with
// w_bias * x_sum into each output's one float chain over the groups in order: the same
// arithmetic for every output whatever M, the tile count or the neighbours, so a row's
// bits are the one-row product's. Unpacking a weight vector is shared by the M x rows.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels.h"

namespace vmlx::vnni {

namespace {

using ::vmlx::avx2::Int16X;

constexpr int64_t PREFETCH_BYTES = 4096; // ahead in each tile's stream

inline __m512i x_pair(const int16_t* x) { // x[0], x[1] in every dword
  int32_t pair;
  std::memcpy(&pair, x, sizeof pair);
  return _mm512_set1_epi32(pair);
}

inline __m512 load16(const float* p) {
  return _mm512_loadu_ps(p);
}

inline __m512 load16(const uint16_t* p) { // float16 bits: exact in float
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// T tiles (16 weight rows each, from tile t0) against M rows of x: out[m][t * 16 + i].
template <int BITS, int G, int T, int M, typename S>
inline void tiles(const QmmArgs& a, const PackedWeights& p, const S* scales, const S* biases, const Int16X* xs, int64_t t0, float* out) {
  const int64_t groups = a.K / G;
  constexpr int C = G / 32;                             // chunks per group
  constexpr int64_t chunk_bytes = 16 * 32 * BITS / 8;   // 16 rows' 32 weights
  constexpr int VECTORS = chunk_bytes / 64;             // 4 (4 bits) or 8 (8 bits)
  constexpr int PAIRS = BITS == 4 ? 4 : 2;              // pair vectors per loaded vector
  const int64_t tile_bytes = groups * C * chunk_bytes;
  __m512 acc[T][M];
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      acc[t][m] = _mm512_setzero_ps();
    }
  }
  const __m512i nibbles = _mm512_set1_epi32(0x000F000F);
  const __m512i bytes = _mm512_set1_epi32(0x00FF00FF);
  // One row of x: its group's dot in two chains (even and odd pairs), added at the end,
  // so the multiply-adds do not wait on each other's latency; integer sums, so the same.
  constexpr int CHAINS = M == 1 ? 2 : 1;
  for (int64_t g = 0; g < groups; ++g) {
    __m512i dot[T][M];
    __m512i odd[T][M];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) {
        dot[t][m] = _mm512_setzero_si512();
        odd[t][m] = _mm512_setzero_si512();
      }
    }
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const uint8_t* w = p.w + (t0 + t) * tile_bytes + (g * C + c) * chunk_bytes;
#pragma GCC unroll 8
        for (int j = 0; j < VECTORS; ++j) {
          _mm_prefetch(reinterpret_cast<const char*>(w + PREFETCH_BYTES + 64 * j), _MM_HINT_T0);
          const __m512i z = _mm512_loadu_si512(w + 64 * j);
#pragma GCC unroll 4
          for (int s = 0; s < PAIRS; ++s) {
            __m512i v;
            if constexpr (BITS == 4) {
              v = s == 0 ? _mm512_and_si512(z, nibbles) : s == 3 ? _mm512_srli_epi16(z, 12) : _mm512_and_si512(_mm512_srli_epi16(z, 4 * s), nibbles);
            } else {
              v = s == 0 ? _mm512_and_si512(z, bytes) : _mm512_srli_epi16(z, 8);
            }
            const int pair = PAIRS * j + s; // weights 2 pair, 2 pair + 1 of the chunk
#pragma GCC unroll 8
            for (int m = 0; m < M; ++m) {
              __m512i& chain = CHAINS == 2 && pair % 2 == 1 ? odd[t][m] : dot[t][m];
              chain = _mm512_dpwssd_epi32(chain, v, x_pair(xs[m].q + g * G + 32 * c + 2 * pair));
            }
          }
        }
      }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const int64_t at = ((t0 + t) * groups + g) * 16;
      const __m512 w_scale = load16(scales + at);
      const __m512 w_bias = load16(biases + at);
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) {
        if constexpr (CHAINS == 2) {
          dot[t][m] = _mm512_add_epi32(dot[t][m], odd[t][m]);
        }
        const __m512 scale = _mm512_mul_ps(w_scale, _mm512_set1_ps(xs[m].scale[g]));
        acc[t][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[t][m]), scale, acc[t][m]);
        acc[t][m] = _mm512_fmadd_ps(w_bias, _mm512_set1_ps(xs[m].sum[g]), acc[t][m]);
      }
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      _mm512_storeu_ps(out + m * T * 16 + t * 16, acc[t][m]);
    }
  }
}

// Tiles a pass for M rows of x (T * M int32 dots and as many float chains in registers):
// one. Measured (one thread): 2 or 4 tiles for 2-4 rows of x cost up to 25% more than
// one (Sapphire Rapids); for one row of x, two tiles (then its two dot chains) cost 25%
// more than one tile with two chains on a Zen 4 guest.
constexpr int tiles_per_pass(int) {
  return 1;
}

// Weight rows [n0, n1) for M rows of x, whole tiles (rows outside [n0, n1) dropped).
template <int BITS, int G, int M, typename S>
void rows_block(const QmmArgs& a, const PackedWeights& p, const S* scales, const S* biases, const Int16X* xs, int64_t n0, int64_t n1) {
  constexpr int T = tiles_per_pass(M);
  alignas(64) float out[M * T * 16];
  const auto emit = [&](int64_t t0, int count) {
    for (int m = 0; m < M; ++m) {
      for (int i = 0; i < count * 16; ++i) {
        const int64_t n = t0 * 16 + i;
        if (n >= n0 && n < n1) {
          a.y[m * a.N + n] = out[m * count * 16 + i];
        }
      }
    }
  };
  int64_t t = n0 / 16;
  const int64_t t1 = (n1 + 15) / 16;
  for (; t + T <= t1; t += T) {
    tiles<BITS, G, T, M>(a, p, scales, biases, xs, t, out);
    emit(t, T);
  }
  for (; t < t1; ++t) {
    tiles<BITS, G, 1, M>(a, p, scales, biases, xs, t, out);
    emit(t, 1);
  }
}

constexpr int64_t X_BLOCK = 8; // rows of x a pass over the weights serves

template <int BITS, int G, typename S>
void rows_all(const QmmArgs& a, const PackedWeights& p, const S* scales, const S* biases, const Int16X* xs, int64_t rows, int64_t n0, int64_t n1) {
  QmmArgs block = a;
  for (int64_t m = 0; m < rows; m += X_BLOCK, block.y += X_BLOCK * a.N) {
    const Int16X* x = xs + m;
    switch (std::min<int64_t>(X_BLOCK, rows - m)) {
      case 1: rows_block<BITS, G, 1>(block, p, scales, biases, x, n0, n1); break;
      case 2: rows_block<BITS, G, 2>(block, p, scales, biases, x, n0, n1); break;
      case 3: rows_block<BITS, G, 3>(block, p, scales, biases, x, n0, n1); break;
      case 4: rows_block<BITS, G, 4>(block, p, scales, biases, x, n0, n1); break;
      case 5: rows_block<BITS, G, 5>(block, p, scales, biases, x, n0, n1); break;
      case 6: rows_block<BITS, G, 6>(block, p, scales, biases, x, n0, n1); break;
      case 7: rows_block<BITS, G, 7>(block, p, scales, biases, x, n0, n1); break;
      default: rows_block<BITS, G, 8>(block, p, scales, biases, x, n0, n1); break;
    }
  }
}

template <int BITS, typename S>
void rows_any(const QmmArgs& a, const PackedWeights& p, const S* scales, const S* biases, const Int16X* xs, int64_t rows, int64_t n0, int64_t n1) {
  switch (a.group_size) {
    case 32: rows_all<BITS, 32>(a, p, scales, biases, xs, rows, n0, n1); break;
    case 64: rows_all<BITS, 64>(a, p, scales, biases, xs, rows, n0, n1); break;
    default: rows_all<BITS, 128>(a, p, scales, biases, xs, rows, n0, n1); break;
  }
}

template <typename S>
void rows_bits(const QmmArgs& a, const PackedWeights& p, const S* scales, const S* biases, const Int16X* xs, int64_t rows, int64_t n0, int64_t n1) {
  a.bits == 4 ? rows_any<4>(a, p, scales, biases, xs, rows, n0, n1) : rows_any<8>(a, p, scales, biases, xs, rows, n0, n1);
}

} // namespace

void qmm_rows_packed(const QmmArgs& a, const Int16X* xs, int64_t rows, int64_t n0, int64_t n1) {
  const PackedWeights& p = *a.packed;
  p.scales_f16 != nullptr ? rows_bits(a, p, p.scales_f16, p.biases_f16, xs, rows, n0, n1) : rows_bits(a, p, p.scales, p.biases, xs, rows, n0, n1);
}

} // namespace vmlx::vnni
