// The integer decode products' body (see qmm_int16_avx2.cpp), shared by the AVX2 file and
// the AVX-512 VNNI one (qmm_int16_vnni.cpp), which differ only in how a 32-element chunk's
// exact integer dot is formed and in how many rows of x a pass serves. No include guard,
// no namespace: each includer opens its own namespace (an anonymous one inside its
// instruction set's), so the copies compiled for AVX-512 never stand in for the AVX2 ones,
// and defines before including:
//   VMLX_INT16_X_BLOCK           rows of x a pass over the weights serves (4 or 8)
//   constexpr int weight_rows(int M)   weight rows a pass covers for M rows of x (<= 4)
//   __m256i dot32(const __m256i q[2], __m256i x0, __m256i x1)   8 lanes of exact int32
//       sums of q[0]·x0 and q[1]·x1 pairwise, lane l = the pairs 2l, 2l+1 of both halves
//       (vpmaddwd's lanes): every body's integer sums are the same numbers;
//   constexpr bool X_OUTER       one-chunk groups (32) loop over x rows outside the weight
//       rows: every unpacked weight row and two x vectors stay in registers (needs 32);
//   VMLX_INT8_X (optional)       x read as int8 (Int16X::q8) and vpdpbusd (AVX-512 VNNI):
//       one instruction per 32-weight chunk, whose lane l sums the same four products as
//       the int16 chunk's lane l (the bytes are laid out so), so the same integers.
#ifndef VMLX_INT8_X
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

struct Chunk { // a 32-weight chunk ready for chunk_dot
  __m256i w[2];
};
struct XChunk { // x's 32 elements for one chunk
  __m256i a, b;
};

template <int BITS>
inline void unpack_chunk(const uint8_t* p, Chunk& c) {
  unpack16<BITS>(p, c.w);
}

inline XChunk load_x(const Int16X& x, int64_t k) {
  return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + k)), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + k + 16))};
}

inline __m256i chunk_dot(const Chunk& q, const XChunk& x) {
  return dot32(q.w, x.a, x.b);
}
#else
using Chunk = __m256i;  // 32 weights as unsigned bytes
using XChunk = __m256i; // 32 elements of x as signed bytes, in the weights' byte order

// Bytes 4l..4l+3 hold the four weights lane l of the int16 chunk sums: for 4 bits the
// elements 4l..4l+3 in order (each byte's two nibbles side by side); for 8 bits the
// elements 2l, 2l+1, 16 + 2l, 17 + 2l (quantize_int16 stores x's int8 copy to match).
template <int BITS>
inline void unpack_chunk(const uint8_t* p, Chunk& c) {
  if constexpr (BITS == 4) {
    const __m256i words = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    c = _mm256_and_si256(_mm256_or_si256(words, _mm256_slli_epi16(words, 4)), _mm256_set1_epi16(0x0F0F));
  } else {
    // 64-bit quarters A0 B0 | A1 B1 (A: bytes 0..15, B: 16..31), then per 128-bit lane the
    // bytes 2l, 2l+1 of its A quarter and of its B quarter into dword l
    const __m256i halves = _mm256_permute4x64_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), 0xD8);
    const __m256i order = _mm256_setr_epi8(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15, 0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15);
    c = _mm256_shuffle_epi8(halves, order);
  }
}

inline XChunk load_x(const Int16X& x, int64_t k) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q8 + k));
}

inline __m256i chunk_dot(const Chunk& q, const XChunk& x) {
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, x);
}
#endif

// Each output's float arithmetic (its lane sums in group order, the horizontal sum, the
// bias term) is independent of M, of weight_rows and of the neighbours, so a row's result
// is the one-row product's bits in every body.

constexpr int64_t PREFETCH_BYTES = 2048;

// For R consecutive rows (their groups are contiguous, as are x's R copies of sx and of
// its group sums): scaled[i] = w_scale[i] * sx[i], and each row's bias term
// sum_g w_bias[g] * xsum[g]. One vector pass instead of a short one per row.
template <int R, typename S>
inline void block_scales(const S* scales, const S* biases, const Int16X& x, int64_t groups, float* scaled, float* bias_dot) {
  const int64_t count = R * groups;
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm256_storeu_ps(scaled + i, _mm256_mul_ps(load8(scales + i), _mm256_loadu_ps(x.scale + i)));
  }
  for (; i < count; ++i) {
    scaled[i] = scalar(scales[i]) * x.scale[i];
  }
  // each row's sum of its products w_bias * xsum: its last groups (masked), then whole
  // vectors. The products stay in registers: stored and read back at once, the masked
  // read of stores just made stalled on store forwarding (~30% of a batched product).
  alignas(32) static constexpr int32_t first_lanes[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  const int64_t whole = groups / 8 * 8;
  const int64_t left = groups - whole;
  const __m256 tail = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(first_lanes + 8 - left)));
  // the last 8 groups' lanes moved down so group whole + l is in lane l
  const __m256i down = _mm256_and_si256(_mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(static_cast<int>(8 - left))), _mm256_set1_epi32(7));
  for (int r = 0; r < R; ++r) {
    const S* b = biases + r * groups;
    const float* xsum = x.sum + r * groups;
    __m256 sum;
    if (groups >= 8) {
      const __m256 last = _mm256_mul_ps(load8(b + groups - 8), _mm256_loadu_ps(xsum + groups - 8));
      sum = _mm256_and_ps(_mm256_permutevar8x32_ps(last, down), tail); // +0 in the other lanes
    } else {
      alignas(32) float products[8] = {};
      for (int64_t g = 0; g < groups; ++g) {
        products[g] = scalar(b[g]) * xsum[g];
      }
      sum = _mm256_load_ps(products);
    }
    for (int64_t g = 0; g < whole; g += 8) {
      sum = _mm256_add_ps(sum, _mm256_mul_ps(load8(b + g), _mm256_loadu_ps(xsum + g)));
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
    if constexpr (X_OUTER && C == 1) { // every weight row unpacked, then each x row loaded once
      Chunk q[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const uint8_t* row = w + r * row_bytes;
        _mm_prefetch(reinterpret_cast<const char*>(row + ahead), _MM_HINT_T0);
        unpack_chunk<BITS>(row, q[r]);
      }
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) {
        const XChunk xc = load_x(xs[m], g * G);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const float* scaled = buf + m * buf_stride + r * groups + g;
          acc[r][m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(chunk_dot(q[r], xc)), _mm256_broadcast_ss(scaled), acc[r][m]);
        }
      }
      continue;
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = w + r * row_bytes;
      _mm_prefetch(reinterpret_cast<const char*>(row + ahead), _MM_HINT_T0);
      Chunk q[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        unpack_chunk<BITS>(row + c * 32 * BITS / 8, q[c]);
      }
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) {
        __m256i part = chunk_dot(q[0], load_x(xs[m], g * G));
#pragma GCC unroll 4
        for (int c = 1; c < C; ++c) {
          part = _mm256_add_epi32(part, chunk_dot(q[c], load_x(xs[m], g * G + 32 * c)));
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

// Weight rows [n0, n1) for M (1..VMLX_INT16_X_BLOCK) rows of x; y row m at a.y + m * a.N,
// weight_rows(M) weight rows a pass and the rest one at a time.
template <int BITS, int G, int M, typename S>
void int_rows_block(const QmmArgs& a, const S* scales, const S* biases, const Int16X* xs, int64_t n0, int64_t n1) {
  constexpr int R = weight_rows(M);
  static_assert(R <= INT16_ROWS);
  const int64_t stride = INT16_ROWS * (a.K / G); // scaled
  thread_local std::vector<float> buf;
  buf.resize(M * stride);
  int64_t n = n0;
  for (; n + R <= n1; n += R) {
    int_rows_m<BITS, G, R, M>(a, scales, biases, xs, n, buf.data(), stride);
  }
  for (; n < n1; ++n) {
    int_rows_m<BITS, G, 1, M>(a, scales, biases, xs, n, buf.data(), stride);
  }
}

template <int BITS, int G, typename S>
void int_rows_all(const QmmArgs& a, const S* scales, const S* biases, const Int16X* xs, int64_t rows, int64_t n0, int64_t n1) {
  QmmArgs block = a;
  for (int64_t m = 0; m < rows; m += VMLX_INT16_X_BLOCK, block.y += VMLX_INT16_X_BLOCK * a.N) {
    const Int16X* x = xs + m;
    switch (std::min<int64_t>(VMLX_INT16_X_BLOCK, rows - m)) {
      case 1: int_rows_block<BITS, G, 1>(block, scales, biases, x, n0, n1); break;
      case 2: int_rows_block<BITS, G, 2>(block, scales, biases, x, n0, n1); break;
      case 3: int_rows_block<BITS, G, 3>(block, scales, biases, x, n0, n1); break;
      case 4: int_rows_block<BITS, G, 4>(block, scales, biases, x, n0, n1); break;
#if VMLX_INT16_X_BLOCK > 4
      case 5: int_rows_block<BITS, G, 5>(block, scales, biases, x, n0, n1); break;
      case 6: int_rows_block<BITS, G, 6>(block, scales, biases, x, n0, n1); break;
      case 7: int_rows_block<BITS, G, 7>(block, scales, biases, x, n0, n1); break;
      default: int_rows_block<BITS, G, 8>(block, scales, biases, x, n0, n1); break;
#endif
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

