// The integer decode products' shared parts (see qmm_int16_avx2.cpp): x's element order,
// the per-group scales and bias term, and the drivers over weight rows and rows of x,
// shared by the AVX2 body and the AVX-512 VNNI one (qmm_int16_vnni.cpp). No include
// guard, no namespace: each includer opens its own namespace (an anonymous one inside its
// instruction set's), so the copies compiled for AVX-512 never stand in for the AVX2 ones,
// and defines before including:
//   constexpr int weight_rows(int M)   weight rows a pass covers for M rows of x (<= 4)
// and after it int_rows_m (declared below): R weight rows against M rows of x.
//
// Every body gives each output the same float arithmetic, so the same bits, whatever M,
// R, the body or the neighbours: per group the exact integer dot as 8 int32 lanes (lane l
// sums the pairs 2l, 2l+1 of the chunk's two 16-element halves, vpmaddwd's lanes, over
// the group's chunks), turned to float and fma'd with the group's w_scale * x_scale into
// one of two 8-lane chains, the even groups' (which starts at the bias term's 8 lanes,
// block_scales) or the odd groups' (which starts at 0; two groups fill one AVX-512
// vector); then hsum(even + odd), avx2_math.h's order of adds.

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

constexpr int64_t PREFETCH_BYTES = 2048;
constexpr int64_t X_BLOCK = 4; // rows of x a pass over the weights serves

// For R consecutive rows (their groups are contiguous, as are x's R copies of sx and of
// its group sums) and M rows of x: scaled[m * stride + i] = w_scale[i] * sx_m[i], and
// each (row, x row)'s bias term sum_g w_bias[g] * xsum[g] as 8 lanes (bias[m][r * 8 + l]:
// the groups l mod 8), where the even groups' chain starts: the horizontal sum at the end
// adds it with the rest. Each weight vector is converted once for all M.
template <int R, int M, typename S>
inline void block_scales(const S* scales, const S* biases, const Int16X* xs, int64_t groups, float* scaled, int64_t stride, float (*bias)[R * 8]) {
  const int64_t count = R * groups;
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 w = load8(scales + i);
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      _mm256_storeu_ps(scaled + m * stride + i, _mm256_mul_ps(w, _mm256_loadu_ps(xs[m].scale + i)));
    }
  }
  for (; i < count; ++i) {
    const float w = scalar(scales[i]);
    for (int m = 0; m < M; ++m) {
      scaled[m * stride + i] = w * xs[m].scale[i];
    }
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
    __m256 sum[M];
    if (groups >= 8) {
      const __m256 last = load8(b + groups - 8);
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) {
        const __m256 products = _mm256_mul_ps(last, _mm256_loadu_ps(xs[m].sum + r * groups + groups - 8));
        sum[m] = _mm256_and_ps(_mm256_permutevar8x32_ps(products, down), tail); // +0 in the other lanes
      }
    } else {
      for (int m = 0; m < M; ++m) {
        alignas(32) float products[8] = {};
        for (int64_t g = 0; g < groups; ++g) {
          products[g] = scalar(b[g]) * xs[m].sum[r * groups + g];
        }
        sum[m] = _mm256_load_ps(products);
      }
    }
    for (int64_t g = 0; g < whole; g += 8) {
      const __m256 w = load8(b + g);
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) {
        sum[m] = _mm256_add_ps(sum[m], _mm256_mul_ps(w, _mm256_loadu_ps(xs[m].sum + r * groups + g)));
      }
    }
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      _mm256_store_ps(bias[m] + 8 * r, sum[m]);
    }
  }
}

template <int BITS, int G, int R, int M, typename S>
inline void int_rows_m(const QmmArgs& a, const S* scales, const S* biases, const Int16X* xs, int64_t n, float* buf, int64_t buf_stride);

// Weight rows [n0, n1) for M (1..X_BLOCK) rows of x; y row m at a.y + m * a.N,
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

