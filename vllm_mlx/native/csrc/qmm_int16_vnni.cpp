// The int16 decode product on AVX-512 VNNI (compiled with -mavx512f/bw/vl/vnni; chosen at
// run time where the CPU has them). Same arithmetic as the AVX2 body, so the same bits:
// vpdpwssd adds a chunk's second vpmaddwd into the first one's lanes in one instruction
// (the integer sums are exact either way), and AVX-512VL's 32 vector registers hold the
// accumulators of 8 rows of x, so one pass over the weights serves 8 decode rows where
// the AVX2 body's 16 registers allow 4 (a batch of 8 read and unpacked every weight twice).
// Under int8 activations (x given its int8 copy) vpdpbusd forms a chunk's lane sums in one
// instruction instead of two, the same integers as the int16 chunk's: the AVX2 body's bits
// for the same int8-rounded x.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
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

#define VMLX_INT16_X_BLOCK 8

// Accumulators: weight_rows(M) * M of 32 registers, with the unpacked weights beside them.
constexpr int weight_rows(int M) {
  return M <= 4 ? 4 : 2;
}

inline __m256i dot32(const __m256i q[2], __m256i x0, __m256i x1) {
  return _mm256_dpwssd_epi32(_mm256_madd_epi16(q[0], x0), q[1], x1);
}

constexpr bool X_OUTER = true;

namespace i16 {
#include "qmm_int16_body.h"
} // namespace i16

namespace i8 { // x's int8 copy (int8 activations): vpdpbusd, one instruction a chunk
#define VMLX_INT8_X
#include "qmm_int16_body.h"
#undef VMLX_INT8_X
} // namespace i8

template <typename S>
void rows_any(const QmmArgs& a, const S* scales, const S* biases, const Int16X* xs, int64_t rows, int64_t n0, int64_t n1) {
  const bool int8 = xs[0].q8 != nullptr;
  if (a.bits == 4) {
    int8 ? i8::int_rows_any<4>(a, scales, biases, xs, rows, n0, n1) : i16::int_rows_any<4>(a, scales, biases, xs, rows, n0, n1);
  } else {
    int8 ? i8::int_rows_any<8>(a, scales, biases, xs, rows, n0, n1) : i16::int_rows_any<8>(a, scales, biases, xs, rows, n0, n1);
  }
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
