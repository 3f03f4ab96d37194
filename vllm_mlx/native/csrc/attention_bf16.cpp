// AVX-512 BF16 body of the attention (kernels.h: SdpaArgs), for head sizes 64 and 128:
// queries, keys, softmax weights and values rounded to bfloat16, every product summed in
// float32 by vdpbf16ps (32 multiply-adds an instruction, twice the float32 FMA rate), the
// softmax itself in float32. Compiled with -mavx512bf16 (x86-64 only), called only when
// the CPU has it and the body is selected (kernels.h: attention_body). The "amx" body is
// this one with its two product passes on AMX tiles (attention_amx.cpp).
//
// Every sum is one row's and one key's (or one row's and one dimension's) chain in a fixed
// order, whatever the rows sharing the task: q.k runs over the D/2 dimension pairs in
// order; a row's weighted values run over key pairs (l0 + 2m, l0 + 2m + 1) of its block
// up to its own last key (the pair's second weight 0 past it). A row's bits therefore do
// not depend on its batch, its prompt block or the rows tiled with it.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels.h"

namespace vmlx {

namespace bf16 {

namespace {

constexpr float NEG_INF = -std::numeric_limits<float>::infinity();
constexpr int KEYS = 16; // keys per transposed group: one zmm of scores
// Key pairs per pass of the weighted sums over many rows: the pass's value pairs (16 KB
// at head size 64) stay in L1 while every row group adds them.
constexpr int64_t VALUE_PAIRS = 32;

// 16 floats of a key or value row (float, or uint16_t IEEE half bits)
inline __m512 load16(const float* p) {
  return _mm512_loadu_ps(p);
}

inline __m512 load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// D values as D / 2 uint32, each a bf16 pair (element 2j low, 2j + 1 high), rounded to nearest even
template <typename T>
inline void to_pairs(const T* x, int64_t D, uint32_t* out) {
  for (int64_t d = 0; d < D; d += 32) {
    const __m512bh b = _mm512_cvtne2ps_pbh(load16(x + d + 16), load16(x + d));
    _mm512_storeu_si512(out + d / 2, reinterpret_cast<__m512i>(b));
  }
}

// rows r[0..15] of 16 uint32 each, transposed in place
inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // r[4a + c]: rows 4a..4a+3, element c of each 4-element lane group
  for (int a = 0; a < 4; a += 2) {
    for (int c = 0; c < 4; ++c) {
      t[4 * a + c] = _mm512_shuffle_i32x4(r[4 * a + c], r[4 * (a + 1) + c], 0x88);
      t[4 * (a + 1) + c] = _mm512_shuffle_i32x4(r[4 * a + c], r[4 * (a + 1) + c], 0xdd);
    }
  }
  for (int c = 0; c < 4; ++c) {
    for (int h = 0; h < 2; ++h) {
      const __m512i lo = t[4 * h + c];
      const __m512i hi = t[8 + 4 * h + c];
      r[c + 4 * h] = _mm512_shuffle_i32x4(lo, hi, 0x88);
      r[c + 8 + 4 * h] = _mm512_shuffle_i32x4(lo, hi, 0xdd);
    }
  }
}

// the first n of 16 lanes (n <= 0: none)
inline __mmask16 lanes(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1);
}

// max(s[0, n)) for n > 0
inline float row_max(const float* s, int64_t n) {
  __m512 vmax = _mm512_set1_ps(NEG_INF);
  for (int64_t j = 0; j < n; j += 16) {
    vmax = _mm512_mask_max_ps(vmax, lanes(n - j), vmax, _mm512_maskz_loadu_ps(lanes(n - j), s + j));
  }
  return _mm512_reduce_max_ps(vmax);
}

// exp(x) for x <= 0: avx2::exp256's range reduction and polynomial 16 lanes at a time, the
// power of two applied by vscalefps (the same values: n >= -126 after the clamp)
inline __m512 exp512(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

struct Buffers {
  std::vector<float> scores;
  std::vector<uint32_t> query, keys, values, weights;
  std::vector<int64_t> head, position, limit;
  std::vector<char> dense;
};

// acc[r][g] = q[r] . keys of group g (16 lanes) over P dimension pairs, R rows by G groups
template <int P, int R, int G>
inline void dots(const uint32_t* const* q, const uint32_t* kt, float scale, float* const* out) {
  __m512 acc[R][G];
  for (int r = 0; r < R; ++r) {
    for (int g = 0; g < G; ++g) {
      acc[r][g] = _mm512_setzero_ps();
    }
  }
  for (int j = 0; j < P; ++j) {
    __m512bh k[G];
    for (int g = 0; g < G; ++g) {
      k[g] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(kt + (g * P + j) * KEYS));
    }
    for (int r = 0; r < R; ++r) {
      const __m512bh qv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(q[r][j])));
      for (int g = 0; g < G; ++g) {
        acc[r][g] = _mm512_dpbf16_ps(acc[r][g], qv, k[g]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int g = 0; g < G; ++g) {
      _mm512_storeu_ps(out[r] + g * KEYS, _mm512_mul_ps(acc[r][g], _mm512_set1_ps(scale)));
    }
  }
}

template <int P, int G>
inline void dots_tile(int rows, const uint32_t* const* q, const uint32_t* kt, float scale, float* const* out) {
  switch (rows) {
    case 1: dots<P, 1, G>(q, kt, scale, out); break;
    case 2: dots<P, 2, G>(q, kt, scale, out); break;
    case 3: dots<P, 3, G>(q, kt, scale, out); break;
    default: dots<P, 4, G>(q, kt, scale, out); break;
  }
}

// out[r][0 : 64] += sum over pairs m in [m0, m1) of weight pair w[r][m] . value pair m,
// 64 dimensions (4 zmm) of D from h, R rows sharing each value load
template <int R>
void weighted(const uint32_t* vp, int64_t D, int64_t h, int64_t m0, int64_t m1, const uint32_t* const* w, float* const* out) {
  __m512 acc[R][4];
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < 4; ++i) {
      acc[r][i] = _mm512_loadu_ps(out[r] + h + 16 * i);
    }
  }
  for (int64_t m = m0; m < m1; ++m) {
    __m512bh v[4];
    for (int i = 0; i < 4; ++i) {
      v[i] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(vp + m * D + h + 16 * i));
    }
    for (int r = 0; r < R; ++r) {
      const __m512bh pv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(w[r][m])));
      for (int i = 0; i < 4; ++i) {
        acc[r][i] = _mm512_dpbf16_ps(acc[r][i], pv, v[i]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < 4; ++i) {
      _mm512_storeu_ps(out[r] + h + 16 * i, acc[r][i]);
    }
  }
}

// Rows in the AMX body's tiles: its buffers hold whole tiles of rows (and of pairs).
constexpr int64_t TILE = 16;

// Words (uint32) of a block of `span` keys in the bf16 layout: the keys in transposed
// groups of 16, then the values in 16-pair chunks.
constexpr int64_t key_words(int64_t P, int64_t span) {
  return (span + KEYS - 1) / KEYS * P * KEYS;
}

constexpr int64_t words(int64_t P, int64_t span) {
  return key_words(P, span) + ((span + 1) / 2 + TILE - 1) / TILE * TILE * 2 * P;
}

// Keys l0 .. last of (b, hkv) into `keys` and their values into `values` in the bf16
// layout, zeros past `last` to the group and chunk.
template <int P, typename T>
void convert(const SdpaArgs& a, int64_t b, int64_t hkv, int64_t l0, int64_t last, uint32_t* keys, uint32_t* values) {
  constexpr int64_t D = 2 * P;
  // keys l0 .. last as bf16, transposed by groups of 16: [group][pair j][key]
  for (int64_t g = 0; g * KEYS < last - l0; ++g) {
    const int64_t n = std::min<int64_t>(KEYS, last - l0 - g * KEYS);
    for (int64_t c = 0; c < P; c += 16) { // pairs c .. c + 16: dimensions 2c .. 2c + 32
      __m512i r[16];
      for (int t = 0; t < KEYS; ++t) {
        const T* k = sdpa_key<T>(a, b, hkv, l0 + g * KEYS + std::min<int64_t>(t, n - 1));
        const __m512i p = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(load16(k + 2 * c + 16), load16(k + 2 * c)));
        r[t] = t < n ? p : _mm512_setzero_si512();
      }
      transpose16(r);
      for (int j = 0; j < 16; ++j) {
        _mm512_storeu_si512(keys + (g * P + c + j) * KEYS, r[j]);
      }
    }
  }
  // values l0 .. last as bf16 pairs of consecutive keys: [pair m][dimension], key 2m low
  alignas(64) const float zeros[D] = {};
  // bf16 lanes of (key 2m: dims d .. d + 16, key 2m + 1: the same) into (2m, 2m + 1) pairs
  alignas(64) static const uint16_t order[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                                 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i interleave = _mm512_load_si512(order);
  for (int64_t m = 0; l0 + 2 * m < last; ++m) {
    const int64_t l = l0 + 2 * m;
    const T* v0 = sdpa_value<T>(a, b, hkv, l);
    for (int64_t d = 0; d < D; d += 16) {
      const __m512 x0 = load16(v0 + d);
      const __m512 x1 = l + 1 < last ? load16(sdpa_value<T>(a, b, hkv, l + 1) + d) : _mm512_load_ps(zeros + d);
      const __m512i both = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(x1, x0));
      _mm512_storeu_si512(values + m * D + d, _mm512_permutexvar_epi16(interleave, both));
    }
  }
  // the last 16-pair chunk's pairs past the keys: weight 0 in every row, but finite
  const int64_t used = (last - l0 + 1) / 2;
  std::fill(values + used * D, values + (used + TILE - 1) / TILE * TILE * D, 0u);
}

// A task's rows over keys l0 .. l1; `prepared`: the block already in the bf16 layout
// (converted once for every task of a call), else converted here up to the rows' last key.
template <int P, typename T>
void task(const SdpaArgs& a, int64_t b, int64_t hkv, int64_t l0, int64_t l1, float* part, int64_t row0, int64_t row1, bool amx, const uint32_t* prepared) {
  constexpr int64_t D = 2 * P;
  const int64_t group = a.Hq / a.Hkv;
  const int64_t rows = row1 - row0;
  const int64_t tiled = (rows + TILE - 1) / TILE * TILE; // rows with the AMX tiles' padding
  const int64_t span = std::max<int64_t>(1, l1 - l0);
  const int64_t groups = (span + KEYS - 1) / KEYS;
  const int64_t pairs = ((span + 1) / 2 + TILE - 1) / TILE * TILE; // whole 16-pair chunks
  thread_local Buffers buf;
  const int64_t stride = (groups * KEYS + 31) / 32 * 32; // floats per row of scores: whole weight vectors
  buf.scores.resize(tiled * stride);
  buf.query.assign(tiled * P, 0u);
  buf.keys.resize(groups * P * KEYS);
  buf.values.resize(pairs * D);
  if (amx) { // every weight a tile reads past its rows' own: 0
    buf.weights.assign(tiled * pairs, 0u);
  } else {
    buf.weights.resize(rows * pairs);
  }
  buf.head.resize(rows);
  buf.position.resize(rows);
  buf.limit.resize(rows);
  buf.dense.resize(rows);
  float* const scores = buf.scores.data();
  int64_t* const head = buf.head.data();
  int64_t* const position = buf.position.data();
  int64_t* const limit = buf.limit.data();
  const int64_t first = a.key_start != nullptr ? a.key_start[b] : 0;
  int64_t last = l0; // keys past every row's limit are never converted
  for (int64_t row = 0; row < rows; ++row) {
    head[row] = hkv * group + (row0 + row) / a.Lq;
    position[row] = (row0 + row) % a.Lq;
    const float* q = a.q + b * a.q_strides[0] + head[row] * a.q_strides[1] + position[row] * a.q_strides[2];
    to_pairs(q, D, buf.query.data() + row * P);
    const int64_t i = position[row];
    int64_t end = a.causal ? std::min(l1, a.Lk - a.Lq + i + 1) : l1;
    while (a.mask != nullptr && end > l0 && !sdpa_allowed(a, b, head[row], i, end - 1)) {
      --end;
    }
    limit[row] = end;
    last = std::max(last, end);
    bool all = true; // the mask allows every key from `first` to the limit
    const int64_t from = std::max(l0, first);
    for (int64_t l = from; a.mask != nullptr && l < end && all; ++l) {
      all = sdpa_allowed(a, b, head[row], i, l);
    }
    buf.dense[row] = all;
  }
  const uint32_t* keys = buf.keys.data();
  const uint32_t* values = buf.values.data();
  if (prepared != nullptr) {
    keys = prepared;
    values = prepared + key_words(P, span);
  } else {
    convert<P, T>(a, b, hkv, l0, last, buf.keys.data(), buf.values.data());
  }
  // Pass 1: scores, 4 rows by 2 key groups at a time
  auto seen = [&](int64_t row, int64_t l) {
    return l >= first && l < limit[row] && (buf.dense[row] || sdpa_allowed(a, b, head[row], position[row], l));
  };
  // a row's scores of keys k0 .. k0 + width it does not see: -inf
  auto mask_row = [&](int64_t row_r, int64_t k0, int64_t width, float* out) {
    if (k0 >= first && (a.mask == nullptr || buf.dense[row_r])) {
      return; // every key up to the row's limit seen (the rest: never read)
    }
    for (int64_t l = k0; l < std::min(limit[row_r], k0 + width); ++l) {
      if (!seen(row_r, l)) {
        out[l - k0] = NEG_INF;
      }
    }
  };
  for (int64_t row = 0; amx && row < rows; row += TILE) {
    int64_t end = l0; // the tile's last key seen
    for (int64_t r = row; r < std::min(rows, row + TILE); ++r) {
      end = std::max(end, limit[r]);
    }
    const int64_t width = end - l0;
    amx::scores(buf.query.data() + row * P, P, keys, (width + KEYS - 1) / KEYS, scores + row * stride, stride);
    for (int64_t r = row; r < std::min(rows, row + TILE); ++r) {
      mask_row(r, l0, width, scores + r * stride);
    }
  }
  for (int64_t g = 0; !amx && g < groups; g += 2) {
    const int G = g + 1 < groups && (l0 + (g + 1) * KEYS) < last ? 2 : 1;
    const uint32_t* kt = keys + g * P * KEYS;
    const int64_t k0 = l0 + g * KEYS;
    for (int64_t row = 0; row < rows; row += 4) {
      const int n = static_cast<int>(std::min<int64_t>(4, rows - row));
      const uint32_t* q[4];
      float* out[4];
      bool any = false;
      for (int r = 0; r < n; ++r) {
        q[r] = buf.query.data() + (row + r) * P;
        out[r] = scores + (row + r) * stride + g * KEYS;
        any = any || k0 < limit[row + r];
      }
      if (!any) {
        continue; // pass 2 reads a row's scores only up to its limit
      }
      if (G == 2) {
        dots_tile<P, 2>(n, q, kt, a.scale, out);
      } else {
        dots_tile<P, 1>(n, q, kt, a.scale, out);
      }
      for (int r = 0; r < n; ++r) {
        mask_row(row + r, k0, G * KEYS, out[r]);
      }
    }
  }
  // Pass 2: softmax in float32; the weights rounded to bf16 pairs, their sum the rounded ones'.
  // The AMX tiles leave the scores unscaled: each scaled here, and the max (the same value:
  // rounding keeps the order)
  const float post = amx ? a.scale : 1.0f;
  const __m512 vpost = _mm512_set1_ps(post);
  for (int64_t row = 0; row < rows; ++row) {
    float* out = part + row * (D + 2);
    float* s = scores + row * stride;
    const int64_t n = limit[row] - l0;
    std::fill(out + 2, out + 2 + D, 0.0f);
    const float max_score = n > 0 ? row_max(s, n) * post : NEG_INF;
    if (max_score == NEG_INF) { // no key seen
      out[0] = NEG_INF;
      out[1] = 0.0f;
      limit[row] = l0;
      continue;
    }
    uint32_t* w = buf.weights.data() + row * pairs;
    const __m512 vmax = _mm512_set1_ps(max_score);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j += 32) { // 16 weight pairs; a pair's second weight past n: 0
      const __mmask16 m0 = lanes(n - j), m1 = lanes(n - j - 16);
      const __m512 e0 = _mm512_maskz_mov_ps(m0, exp512(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(m0, s + j), vpost, vmax)));
      const __m512 e1 = _mm512_maskz_mov_ps(m1, exp512(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(m1, s + j + 16), vpost, vmax)));
      const __m512i p = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(e1, e0));
      _mm512_storeu_si512(w + j / 2, p);
      sum = _mm512_add_ps(sum, _mm512_castsi512_ps(_mm512_slli_epi32(p, 16)));
      sum = _mm512_add_ps(sum, _mm512_castsi512_ps(_mm512_and_si512(p, _mm512_set1_epi32(static_cast<int>(0xffff0000u)))));
    }
    out[0] = max_score;
    out[1] = _mm512_reduce_add_ps(sum);
  }
  // Pass 3: weighted value sums over each row's own key pairs, rows of one pair count together
  for (int64_t row = 0; amx && row < rows; row += TILE) {
    int64_t own = 0; // the tile's most pairs
    for (int64_t r = row; r < std::min(rows, row + TILE); ++r) {
      own = std::max(own, (limit[r] - l0 + 1) / 2);
    }
    alignas(64) float acc[TILE * D];
    amx::weighted(buf.weights.data() + row * pairs, pairs, values, D, (own + TILE - 1) / TILE, acc);
    for (int64_t r = row; r < std::min(rows, row + TILE); ++r) {
      std::memcpy(part + r * (D + 2) + 2, acc + (r - row) * D, D * sizeof(float));
    }
  }
  if (amx) {
    return;
  }
  const int64_t chunk = rows > 4 ? VALUE_PAIRS * 64 / D : pairs;
  for (int64_t c0 = 0; c0 < pairs; c0 += chunk) {
    const int64_t c1 = std::min(pairs, c0 + chunk);
    for (int64_t row = 0; row < rows;) {
      const int64_t own = (limit[row] - l0 + 1) / 2;
      int n = 1;
      while (n < 4 && row + n < rows && (limit[row + n] - l0 + 1) / 2 == own) {
        ++n;
      }
      const int64_t end = std::min(c1, own);
      if (end > c0) {
        const uint32_t* w[4];
        float* out[4];
        for (int r = 0; r < n; ++r) {
          w[r] = buf.weights.data() + (row + r) * pairs;
          out[r] = part + (row + r) * (D + 2) + 2;
        }
        for (int64_t h = 0; h < D; h += 64) {
          switch (n) {
            case 1: weighted<1>(values, D, h, c0, end, w, out); break;
            case 2: weighted<2>(values, D, h, c0, end, w, out); break;
            case 3: weighted<3>(values, D, h, c0, end, w, out); break;
            default: weighted<4>(values, D, h, c0, end, w, out); break;
          }
        }
      }
      row += n;
    }
  }
}

enum Body : int { FLOAT, BF16, AMX };

bool amx_supported() {
#if defined(VMLX_HAVE_AMX)
  return supported() && amx::supported();
#else
  return false;
#endif
}

std::atomic<int>& selected() {
  static std::atomic<int> on{[] {
    // Unset or "auto": amx where the CPU and kernel grant it, else float. Chosen once, before
    // any model runs, so every row of every request runs one body.
    const char* env = std::getenv("VLLM_MLX_NATIVE_ATTENTION");
    const std::string name = env != nullptr && *env != '\0' ? env : "auto";
    if ((name == "amx" || name == "auto") && amx_supported()) {
      return AMX;
    }
    return name == "bf16" && supported() ? BF16 : FLOAT;
  }()};
  return on;
}

} // namespace

bool supported() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16") &&
      __builtin_cpu_supports("f16c");
}

bool runs(const SdpaArgs& a) {
  return (a.D == 64 || a.D == 128) && selected().load(std::memory_order_relaxed) != FLOAT;
}

void sdpa_task(const SdpaArgs& a, int64_t b, int64_t hkv, int64_t l0, int64_t l1, float* part, int64_t row0, int64_t row1, const uint32_t* prepared) {
  const bool amx = selected().load(std::memory_order_relaxed) == AMX;
  if (a.k_f16 != nullptr) {
    a.D == 64 ? task<32, uint16_t>(a, b, hkv, l0, l1, part, row0, row1, amx, prepared)
              : task<64, uint16_t>(a, b, hkv, l0, l1, part, row0, row1, amx, prepared);
  } else {
    a.D == 64 ? task<32, float>(a, b, hkv, l0, l1, part, row0, row1, amx, prepared)
              : task<64, float>(a, b, hkv, l0, l1, part, row0, row1, amx, prepared);
  }
}

int64_t block_words(int64_t D, int64_t span) {
  return words(D / 2, span);
}

void prepare(const SdpaArgs& a, int64_t b, int64_t hkv, int64_t l0, int64_t l1, uint32_t* out) {
  const int64_t span = l1 - l0;
  if (a.k_f16 != nullptr) {
    a.D == 64 ? convert<32, uint16_t>(a, b, hkv, l0, l1, out, out + key_words(32, span))
              : convert<64, uint16_t>(a, b, hkv, l0, l1, out, out + key_words(64, span));
  } else {
    a.D == 64 ? convert<32, float>(a, b, hkv, l0, l1, out, out + key_words(32, span))
              : convert<64, float>(a, b, hkv, l0, l1, out, out + key_words(64, span));
  }
}

} // namespace bf16

const char* attention_body() {
  static const char* const names[] = {"float", "bf16", "amx"};
  return names[bf16::selected().load()];
}

bool set_attention_body(const char* name) {
  const std::string wanted(name);
  if (wanted == "float" || (wanted == "bf16" && bf16::supported()) || (wanted == "amx" && bf16::amx_supported())) {
    bf16::selected().store(wanted == "float" ? bf16::FLOAT : wanted == "bf16" ? bf16::BF16 : bf16::AMX);
    return true;
  }
  return false;
}

} // namespace vmlx
