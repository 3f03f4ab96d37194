// AVX2 + FMA + F16C body of the decode attention (kernels.h: SdpaArgs): compiled with
// -mavx2 -mfma -mf16c (x86-64 only), called only when the CPU has all three (kernels.cpp).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "avx2_math.h"
#include "kernels.h"

namespace vmlx::avx2 {

namespace {

// Keys and values are float or uint16_t (half bits, converted 8 at a time by F16C's
// vcvtph2ps): the bodies are templates on that type T, so the float32 path is the same
// code as before. They read key and value rows through a source: the cache itself
// (CacheRows) or, when many query rows share a key block, the block converted to float
// once (FloatBlock): the same float values either way, so the same bits.
template <typename T>
struct CacheRows {
  using Element = T;
  const SdpaArgs& a;
  int64_t b, hkv;
  const T* key(int64_t l) const {
    return sdpa_key<T>(a, b, hkv, l);
  }
  const T* value(int64_t l) const {
    return sdpa_value<T>(a, b, hkv, l);
  }
};

struct FloatBlock {
  using Element = float;
  const float* k; // rows l0 .. l0 + n of D floats each
  const float* v;
  int64_t l0, D;
  const float* key(int64_t l) const {
    return k + (l - l0) * D;
  }
  const float* value(int64_t l) const {
    return v + (l - l0) * D;
  }
};

// Key rows ahead of the scoring pass whose loads are started early (prefetch_row).
constexpr int64_t KEY_PREFETCH = 16;

// Starts loading one key or value row (row_bytes long) into the caches.
inline void prefetch_row(const void* row, int64_t row_bytes) {
  const char* p = static_cast<const char*>(row);
  for (int64_t o = 0; o < row_bytes; o += 64) {
    _mm_prefetch(p + o, _MM_HINT_T0);
  }
}

// Query rows of a task past which its half keys and values are converted to float once:
// each key row is otherwise converted again for every three of them.
constexpr int64_t CONVERT_ROWS = 12;
// Query rows whose weighted value sums share each value row's loads (2 measured slower).
constexpr int WEIGHTED_ROWS = 3;

// acc[0:D] += p * v[0:D]
template <typename T>
inline void axpy(float* acc, float p, const T* v, int64_t D) {
  const __m256 pv = _mm256_set1_ps(p);
  int64_t d = 0;
  for (; d + 8 <= D; d += 8) {
    _mm256_storeu_ps(acc + d, _mm256_fmadd_ps(pv, load8(v + d), _mm256_loadu_ps(acc + d)));
  }
  for (; d < D; ++d) {
    acc[d] += p * scalar(v[d]);
  }
}

// dots[r] = q[r] . k over 8 V floats, for n <= 4 query rows sharing each load of k.
template <int V, typename T>
inline void row_dots(const float* const* q, int n, const T* k, float* dots) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int j = 0; j < V; ++j) {
    const __m256 kv = load8(k + 8 * j);
    for (int r = 0; r < n; ++r) {
      acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(q[r] + 8 * j), kv, acc[r]);
    }
  }
  for (int r = 0; r < n; ++r) {
    dots[r] = hsum(acc[r]);
  }
}

// dots[r][j] = q[r] . k[j] over 8 V floats for R <= 3 query rows and 4 key rows: 4R
// independent FMA chains (row_dots has one per row, latency-bound), and the 4 sums of a
// row reduced at once (a 4x4 transpose), in hsum's order, so each dot is row_dots' bits.
template <int V, int R, typename T>
inline void dots_4keys(const float* const* q, const T* const* k, float dots[][4]) {
  __m256 acc[R][4];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < 4; ++j) {
      acc[r][j] = _mm256_setzero_ps();
    }
  }
  // a key vector held, the query vectors read as the FMAs' memory operands: 4R + 1
  // registers (holding 4 key and R query vectors took 4R + 5 > 16: a spilled sum, its
  // store and reload in every iteration's chain)
  for (int d = 0; d < V; ++d) {
    for (int j = 0; j < 4; ++j) {
      const __m256 kv = load8(k[j] + 8 * d);
      for (int r = 0; r < R; ++r) {
        acc[r][j] = _mm256_fmadd_ps(_mm256_loadu_ps(q[r] + 8 * d), kv, acc[r][j]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    __m128 s[4];
    for (int j = 0; j < 4; ++j) {
      s[j] = _mm_add_ps(_mm256_castps256_ps128(acc[r][j]), _mm256_extractf128_ps(acc[r][j], 1));
    }
    _MM_TRANSPOSE4_PS(s[0], s[1], s[2], s[3]); // s[i]: element i of each key's sum
    _mm_storeu_ps(dots[r], _mm_add_ps(_mm_add_ps(s[0], s[2]), _mm_add_ps(s[1], s[3])));
  }
}

template <int V, typename T>
inline void dots_tile(int rows, const float* const* q, const T* const* k, float dots[][4]) {
  switch (rows) {
    case 1: dots_4keys<V, 1, T>(q, k, dots); break;
    case 2: dots_4keys<V, 2, T>(q, k, dots); break;
    default: dots_4keys<V, 3, T>(q, k, dots); break;
  }
}

// out[r][0 : 8 V] += sum over keys l in [l0, l1) of p[r][l - pl] * value row l for R <= 3
// rows with one key range: each value row loaded (and, if half, converted) once for all
// R rows, 4 vectors at a time so the 4R sums stay in registers. Each sum runs over the
// keys in order, one FMA per key, so every row gets the bits a row on its own gets, and
// a key range split into consecutive calls (out holding the sum so far) gets them too.
template <int V, int R, typename Src>
void weighted_sums(
    const Src& src,
    int64_t pl,
    int64_t l0,
    int64_t l1,
    const float* const* p,
    float* const* out) {
  constexpr int W = 4; // vectors of a value row per pass
  for (int h = 0; h < V; h += W) {
    __m256 acc[R][W];
    for (int r = 0; r < R; ++r) {
      for (int i = 0; i < W; ++i) {
        acc[r][i] = _mm256_loadu_ps(out[r] + 8 * (h + i));
      }
    }
    // R weights and one value vector held: 4R + R + 1 <= 16 registers (4 value vectors
    // and a weight took 4R + 5: a spilled sum in every key's chain)
    for (int64_t l = l0; l < l1; ++l) {
      const auto* v = src.value(l) + 8 * h;
      __m256 w[R];
      for (int r = 0; r < R; ++r) {
        w[r] = _mm256_set1_ps(p[r][l - pl]);
      }
      for (int i = 0; i < W; ++i) {
        const __m256 vv = load8(v + 8 * i);
        for (int r = 0; r < R; ++r) {
          acc[r][i] = _mm256_fmadd_ps(w[r], vv, acc[r][i]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int i = 0; i < W; ++i) {
        _mm256_storeu_ps(out[r] + 8 * (h + i), acc[r][i]);
      }
    }
  }
}

template <int V, typename Src>
void weighted_tile(int rows, const Src& src, int64_t pl, int64_t l0, int64_t l1, const float* const* p, float* const* out) {
  switch (rows) {
    case 1: weighted_sums<V, 1>(src, pl, l0, l1, p, out); break;
    case 2: weighted_sums<V, 2>(src, pl, l0, l1, p, out); break;
    default: weighted_sums<V, 3>(src, pl, l0, l1, p, out); break;
  }
}

// Keys per pass of the weighted sums over many query rows: the pass's value rows (16 KB of
// floats at head size 64) stay in L1 while every row group adds them, instead of the whole
// block's coming from L2 again for each group.
constexpr int64_t VALUE_CHUNK = 64;

struct TaskBuffers {
  std::vector<float> scores;
  std::vector<const float*> query;
  std::vector<int64_t> head, position, limit;
  std::vector<char> dense;
  void resize(int64_t rows, int64_t span) {
    scores.resize(rows * span);
    query.resize(rows);
    head.resize(rows);
    position.resize(rows);
    limit.resize(rows);
    dense.resize(rows);
  }
};

// Rows row0 .. row1 of the task's group * Lq query rows (row = head in group * Lq + i),
// part [row1 - row0, D + 2]: every row's numbers are its own, whatever rows share the task.
template <typename Src>
void sdpa_task_as(const SdpaArgs& a, int64_t b, int64_t hkv, int64_t l0, int64_t l1, float* part, int64_t row0, int64_t row1, const Src& src) {
  using T = typename Src::Element;
  const int64_t group = a.Hq / a.Hkv;
  const int64_t D = a.D;
  const int64_t rows = row1 - row0;
  const int64_t span = std::max<int64_t>(1, l1 - l0);
  // this thread's buffers, reached once (a thread_local in a shared library is a call away)
  thread_local TaskBuffers buffers;
  buffers.resize(rows, span);
  float* const scores = buffers.scores.data();
  const float** const query = buffers.query.data();
  int64_t* const head = buffers.head.data();
  int64_t* const position = buffers.position.data();
  int64_t* const limit = buffers.limit.data();
  char* const dense = buffers.dense.data();
  // Pass 1: all scores of this key range, each key row read once for every query row.
  // each row's query and head once, not an integer division per key and row
  for (int64_t row = 0; row < rows; ++row) {
    head[row] = hkv * group + (row0 + row) / a.Lq;
    position[row] = (row0 + row) % a.Lq;
    query[row] = a.q + b * a.q_strides[0] + head[row] * a.q_strides[1] + position[row] * a.q_strides[2];
  }
  // Each row's keys end at its causal limit, or after the last key its mask allows (a
  // batch's causal mask): the vector sums below then group a row's terms by its own key
  // positions, not by how many masked keys follow them in this block.
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t i = position[row];
    int64_t end = a.causal ? std::min(l1, a.Lk - a.Lq + i + 1) : l1;
    while (a.mask != nullptr && end > l0 && !sdpa_allowed(a, b, head[row], i, end - 1)) {
      --end;
    }
    limit[row] = end;
  }
  const bool unmasked = a.mask == nullptr && a.key_start == nullptr;
  // a left-padded batch's first key: the ones before it score -inf (weight 0)
  const int64_t first = a.key_start != nullptr ? a.key_start[b] : 0;
  // Rows whose mask allows every key from `first` to their limit (a batch's padding and
  // causal mask: most rows of a prompt block) need not read it again for every key below.
  bool all_dense = true;
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t from = std::max(l0, first);
    bool all = true;
    if (a.mask != nullptr && limit[row] > from) {
      if (a.mask_strides[3] == 1) {
        const bool* m = a.mask + b * a.mask_strides[0] + head[row] * a.mask_strides[1] + position[row] * a.mask_strides[2];
        all = std::memchr(m + from, 0, limit[row] - from) == nullptr;
      } else {
        for (int64_t l = from; l < limit[row] && all; ++l) {
          all = sdpa_allowed(a, b, head[row], position[row], l);
        }
      }
    }
    dense[row] = all;
    all_dense = all_dense && all;
  }
  // whether row `row` sees key l: the causal limit, key_start and the mask
  auto seen = [&](int64_t row, int64_t l) {
    return l >= first && l < limit[row] &&
        (all_dense || dense[row] || sdpa_allowed(a, b, head[row], position[row], l));
  };
  // Every dot is one key's and one row's, whatever the tiling: a row's scores are the
  // same bits in any batch and any block of query rows.
  if (D == 64 || D == 128) { // key rows in fours, query rows in threes
    // rows read from the cache itself (a block converted to float is in L2 already)
    constexpr bool from_cache = !std::is_same_v<Src, FloatBlock>;
    const int64_t row_bytes = D * static_cast<int64_t>(sizeof(T));
    for (int64_t l = l0; from_cache && l < std::min(l1, l0 + KEY_PREFETCH); ++l) {
      prefetch_row(src.key(l), row_bytes);
    }
    int64_t l = l0;
    for (; l + 4 <= l1; l += 4) {
      // the keys KEY_PREFETCH ahead and these keys' values (read by pass 3) on their way
      // from memory while these scores are computed: a decode step's cache rows are not
      // in any cache (the weights stream through it every step), and a task's few
      // hundred rows are too short a stream for the hardware prefetcher to ramp up
      for (int64_t j = 0; from_cache && j < 4; ++j) {
        if (l + KEY_PREFETCH + j < l1) {
          prefetch_row(src.key(l + KEY_PREFETCH + j), row_bytes);
        }
        prefetch_row(src.value(l + j), row_bytes);
      }
      const T* k[4] = {src.key(l), src.key(l + 1), src.key(l + 2), src.key(l + 3)};
      for (int64_t row = 0; row < rows; row += 3) {
        const int n = static_cast<int>(std::min<int64_t>(3, rows - row));
        bool any = false; // a row that sees one of these keys (not past every causal limit)
        for (int r = 0; r < n; ++r) {
          any = any || l < limit[row + r];
        }
        if (!any) {
          for (int r = 0; r < n; ++r) {
            std::fill_n(scores + (row + r) * span + (l - l0), 4, -std::numeric_limits<float>::infinity());
          }
          continue;
        }
        float dots[3][4];
        if (D == 64) {
          dots_tile<8, T>(n, query + row, k, dots);
        } else {
          dots_tile<16, T>(n, query + row, k, dots);
        }
        for (int r = 0; r < n; ++r) {
          float* out = scores + (row + r) * span + (l - l0);
          if (all_dense && l >= first && l + 4 <= limit[row + r]) { // all four seen
            _mm_storeu_ps(out, _mm_mul_ps(_mm_loadu_ps(dots[r]), _mm_set1_ps(a.scale)));
            continue;
          }
          for (int j = 0; j < 4; ++j) {
            out[j] = seen(row + r, l + j) ? dots[r][j] * a.scale : -std::numeric_limits<float>::infinity();
          }
        }
      }
    }
    for (; l < l1; ++l) {
      const T* k = src.key(l);
      for (int64_t row = 0; row < rows; row += 4) {
        const int n = static_cast<int>(std::min<int64_t>(4, rows - row));
        float dots[4];
        if (D == 64) {
          row_dots<8, T>(query + row, n, k, dots);
        } else {
          row_dots<16, T>(query + row, n, k, dots);
        }
        for (int r = 0; r < n; ++r) {
          scores[(row + r) * span + (l - l0)] =
              seen(row + r, l) ? dots[r] * a.scale : -std::numeric_limits<float>::infinity();
        }
      }
    }
  } else {
  for (int64_t l = l0; l < l1; ++l) {
    const T* k = src.key(l);
    for (int64_t row = 0; row < rows; ++row) {
      scores[row * span + (l - l0)] = l < limit[row] && (unmasked || sdpa_allowed(a, b, head[row], position[row], l))
          ? dot(k, query[row], D) * a.scale
          : -std::numeric_limits<float>::infinity();
    }
  }
  }
  // Pass 2: softmax numerators, vectorized.
  for (int64_t row = 0; row < rows; ++row) {
    float* out = part + row * (D + 2);
    float* s = scores + row * span;
    const int64_t n = limit[row] - l0;
    if (n <= 0) {
      out[0] = -std::numeric_limits<float>::infinity();
      out[1] = 0.0f;
      std::fill(out + 2, out + 2 + D, 0.0f);
      continue;
    }
    const float max_score = row_max(s, n);
    if (max_score == -std::numeric_limits<float>::infinity()) { // every key masked
      out[0] = max_score;
      out[1] = 0.0f;
      std::fill(out + 2, out + 2 + D, 0.0f);
      limit[row] = l0; // and no value rows in pass 3
      continue;
    }
    const float sum = exp_sum(s, n, max_score);
    out[0] = max_score;
    out[1] = sum;
    std::fill(out + 2, out + 2 + D, 0.0f);
  }
  // Pass 3: weighted sum of the value rows. Head sizes 64 and 128 keep up to 3 rows'
  // sums in registers over their keys, each value row read once for them; others add
  // into memory, each value row read once for every query row.
  if (D == 64 || D == 128) {
    const int64_t chunk = rows > WEIGHTED_ROWS ? VALUE_CHUNK * 64 / D : span;
    for (int64_t c0 = l0; c0 < l1; c0 += chunk) {
      const int64_t c1 = std::min(l1, c0 + chunk);
      for (int64_t row = 0; row < rows;) {
        int n = 1; // up to WEIGHTED_ROWS rows with one key range (a decode step's rows all have one)
        while (n < WEIGHTED_ROWS && row + n < rows && limit[row + n] == limit[row]) {
          ++n;
        }
        const int64_t end = std::min(c1, limit[row]);
        if (end > c0) {
          const float* p[3];
          float* out[3];
          for (int r = 0; r < n; ++r) {
            p[r] = scores + (row + r) * span;
            out[r] = part + (row + r) * (D + 2) + 2;
          }
          if (D == 64) {
            weighted_tile<8>(n, src, l0, c0, end, p, out);
          } else {
            weighted_tile<16>(n, src, l0, c0, end, p, out);
          }
        }
        row += n;
      }
    }
    return;
  }
  for (int64_t l = l0; l < l1; ++l) {
    const T* v = src.value(l);
    for (int64_t row = 0; row < rows; ++row) {
      if (l < limit[row]) {
        axpy(part + row * (D + 2) + 2, scores[row * span + (l - l0)], v, D);
      }
    }
  }
}

// rows * D half keys or values of the block as floats (vcvtph2ps, as load8 converts them)
void to_floats(const CacheRows<uint16_t>& src, bool keys, int64_t l0, int64_t l1, int64_t D, float* out) {
  for (int64_t l = l0; l < l1; ++l) {
    const uint16_t* row = keys ? src.key(l) : src.value(l);
    float* o = out + (l - l0) * D;
    int64_t d = 0;
    for (; d + 8 <= D; d += 8) {
      _mm256_storeu_ps(o + d, load8(row + d));
    }
    for (; d < D; ++d) {
      o[d] = scalar(row[d]);
    }
  }
}

} // namespace

void sdpa_task(const SdpaArgs& a, int64_t b, int64_t hkv, int64_t l0, int64_t l1, float* part, int64_t row0, int64_t row1) {
  if (a.k_f16 == nullptr) {
    sdpa_task_as(a, b, hkv, l0, l1, part, row0, row1, CacheRows<float>{a, b, hkv});
    return;
  }
  const CacheRows<uint16_t> cache{a, b, hkv};
  if (row1 - row0 < CONVERT_ROWS) {
    sdpa_task_as(a, b, hkv, l0, l1, part, row0, row1, cache);
    return;
  }
  thread_local std::vector<float> keys, values;
  keys.resize(std::max<int64_t>(1, l1 - l0) * a.D);
  values.resize(keys.size());
  to_floats(cache, true, l0, l1, a.D, keys.data());
  to_floats(cache, false, l0, l1, a.D, values.data());
  sdpa_task_as(a, b, hkv, l0, l1, part, row0, row1, FloatBlock{keys.data(), values.data(), l0, a.D});
}

} // namespace vmlx::avx2
