// Attention drivers: a sequence's keys split into blocks from its first visible key, the
// blocks run as pool tasks on this CPU's body and merged in block order, so a query row's
// bits do not depend on its batch, its prompt block or how the work was split. The generic
// body is plain C++ the compiler vectorizes for the baseline ISA.
#include "kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "threadpool.h"

namespace vmlx {

namespace generic {

namespace {

// T: float or uint16_t (half bits) keys and values, one instantiation each.
template <typename T>
void sdpa_task_as(const SdpaArgs& a, int64_t b, int64_t hkv, int64_t l0, int64_t l1, float* part, int64_t row0, int64_t row1) {
  const int64_t group = a.Hq / a.Hkv;
  const int64_t D = a.D;
  std::vector<float> scores(std::max<int64_t>(1, l1 - l0));
  for (int64_t row = row0; row < row1; ++row) {
    const int64_t h = hkv * group + row / a.Lq;
    const int64_t i = row % a.Lq;
    float* out = part + (row - row0) * (D + 2);
    const float* q = a.q + b * a.q_strides[0] + h * a.q_strides[1] + i * a.q_strides[2];
    const int64_t limit = a.causal ? std::min(l1, a.Lk - a.Lq + i + 1) : l1;
    float max_score = -std::numeric_limits<float>::infinity();
    for (int64_t l = l0; l < limit; ++l) {
      const T* k = sdpa_key<T>(a, b, hkv, l);
      float dot = 0.0f;
      for (int64_t d = 0; d < D; ++d) {
        dot += q[d * a.q_strides[3]] * to_float(k[d * a.k_strides[3]]);
      }
      scores[l - l0] = sdpa_allowed(a, b, h, i, l) ? dot * a.scale : -std::numeric_limits<float>::infinity();
      max_score = std::max(max_score, scores[l - l0]);
    }
    float sum = 0.0f;
    float* acc = out + 2;
    std::fill(acc, acc + D, 0.0f);
    for (int64_t l = l0; l < limit && max_score > -std::numeric_limits<float>::infinity(); ++l) {
      const float p = std::exp(scores[l - l0] - max_score);
      sum += p;
      const T* v = sdpa_value<T>(a, b, hkv, l);
      for (int64_t d = 0; d < D; ++d) {
        acc[d] += p * to_float(v[d * a.v_strides[3]]);
      }
    }
    out[0] = max_score;
    out[1] = sum;
  }
}

} // namespace

void sdpa_task(const SdpaArgs& a, int64_t b, int64_t hkv, int64_t l0, int64_t l1, float* part, int64_t row0, int64_t row1) {
  if (a.k_f16 != nullptr) {
    sdpa_task_as<uint16_t>(a, b, hkv, l0, l1, part, row0, row1);
  } else {
    sdpa_task_as<float>(a, b, hkv, l0, l1, part, row0, row1);
  }
}

} // namespace generic

namespace {

// Keys per attention task. A sequence's keys are split into blocks of this many counted from
// its first visible key (key_start, or the mask's first true entry), whatever the batch, the
// number of query rows or the context length: a query row's sums then run over the same
// blocks in the same order in a decode step, a prefill block of any size and any batch.
constexpr int64_t KEY_BLOCK = 256;

// The first key sequence b may see: key_start[b], else the first key any of its rows'
// mask entries allow (a left-padded batch's mask), else 0.
int64_t first_key(const SdpaArgs& a, int64_t b) {
  if (a.key_start != nullptr) {
    return std::clamp<int64_t>(a.key_start[b], 0, a.Lk);
  }
  if (a.mask == nullptr) {
    return 0;
  }
  int64_t first = a.Lk;
  const int64_t heads = a.mask_strides[1] == 0 ? 1 : a.Hq;
  const int64_t rows = a.mask_strides[2] == 0 ? 1 : a.Lq;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t l = 0; l < first; ++l) {
        if (sdpa_allowed(a, b, h, i, l)) {
          first = l;
          break;
        }
      }
    }
  }
  return first;
}

// Whether the bf16 body runs this call (it reads the key blocks prepare() leaves).
bool runs_bf16(const SdpaArgs& a, bool fast) {
#if defined(VMLX_HAVE_AVX2) && defined(VMLX_HAVE_BF16)
  return fast && bf16::runs(a);
#else
  return false;
#endif
}

// One task's attention body on this CPU: the vector body reads rows of D contiguous floats;
// `prepared`: the bf16 body's block already converted (nullptr: it converts its own).
void run_task(const SdpaArgs& a, bool fast, int64_t b, int64_t hkv, int64_t l0, int64_t l1, float* part, int64_t row0, int64_t row1, const uint32_t* prepared = nullptr) {
#if defined(VMLX_HAVE_AVX2)
  if (fast) {
#if defined(VMLX_HAVE_BF16)
    if (bf16::runs(a)) {
      bf16::sdpa_task(a, b, hkv, l0, l1, part, row0, row1, prepared);
      return;
    }
#endif
    avx2::sdpa_task(a, b, hkv, l0, l1, part, row0, row1);
    return;
  }
#endif
  generic::sdpa_task(a, b, hkv, l0, l1, part, row0, row1);
}

// A query row's output from its per-block parts (max score, sum, weighted values; `stride`
// floats apart, in block order): each block rescaled to the row's overall max, summed in
// block order (the flash-decoding merge). Both drivers below call it, so a row's bits do
// not depend on which one ran it.
void merge_row(const float* parts, int64_t stride, int64_t count, int64_t D, float* out) {
  float max_score = -std::numeric_limits<float>::infinity();
  for (int64_t s = 0; s < count; ++s) {
    max_score = std::max(max_score, parts[s * stride]);
  }
  float sum = 0.0f;
  std::fill(out, out + D, 0.0f);
  for (int64_t s = 0; s < count; ++s) {
    const float* p = parts + s * stride;
    if (p[1] == 0.0f) {
      continue; // a block wholly past this row's causal limit, or masked
    }
    const float w = std::exp(p[0] - max_score);
    sum += p[1] * w;
    for (int64_t d = 0; d < D; ++d) {
      out[d] += p[2 + d] * w;
    }
  }
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  for (int64_t d = 0; d < D; ++d) {
    out[d] *= inv;
  }
}

// Query rows per task when a call has many (a prompt block): the tile's scores for one key
// block (ROW_TILE x KEY_BLOCK floats) and that block's keys and values stay in L2 while the
// task passes over them, and the parts it keeps are its rows' only.
constexpr int64_t ROW_TILE = 48;

// Few query rows (decode steps, a short suffix): tasks (b, hkv, key block) over all of a
// head's rows, so even one row's long context splits over the pool; merged afterwards.
void sdpa_by_blocks(const SdpaArgs& a, const int64_t* first, bool fast) {
  ThreadPool& pool = ThreadPool::instance();
  const int64_t group = a.Hq / a.Hkv;
  const int64_t rows = group * a.Lq;
  thread_local std::vector<int64_t> blocks, task0;
  blocks.resize(a.B);
  task0.resize(a.B + 1);
  task0[0] = 0;
  for (int64_t b = 0; b < a.B; ++b) {
    blocks[b] = (a.Lk - first[b] + KEY_BLOCK - 1) / KEY_BLOCK;
    task0[b + 1] = task0[b] + a.Hkv * blocks[b];
  }
  const int64_t part_size = rows * (a.D + 2);
  thread_local std::vector<float> parts;
  parts.resize(std::max<int64_t>(1, task0[a.B]) * part_size);
  float* part_base = parts.data(); // the tasks run on other threads: not `parts`
  const int64_t* counts = blocks.data();
  const int64_t* starts = task0.data();
  pool.parallel_for(static_cast<int>(task0[a.B]), [&](int t) {
    int64_t b = 0;
    while (t >= starts[b + 1]) {
      ++b;
    }
    const int64_t hkv = (t - starts[b]) / counts[b];
    const int64_t block = (t - starts[b]) % counts[b];
    const int64_t l0 = first[b] + block * KEY_BLOCK;
    const int64_t l1 = std::min(a.Lk, l0 + KEY_BLOCK);
    run_task(a, fast, b, hkv, l0, l1, part_base + t * part_size, 0, rows);
  });
  for (int64_t b = 0; b < a.B; ++b) {
    for (int64_t hkv = 0; hkv < a.Hkv; ++hkv) {
      const float* head_parts = parts.data() + (task0[b] + hkv * blocks[b]) * part_size;
      for (int64_t row = 0; row < rows; ++row) {
        const int64_t h = hkv * group + row / a.Lq;
        const int64_t i = row % a.Lq;
        float* out = a.out + ((b * a.Hq + h) * a.Lq + i) * a.D;
        merge_row(head_parts + row * (a.D + 2), part_size, blocks[b], a.D, out);
      }
    }
  }
}

// Many query rows (a prompt block): tasks (b, hkv, tile of ROW_TILE rows), each passing
// over its sequence's key blocks in order and merging its own rows. Memory stays a tile's
// parts per thread (not every row's for every block), the merge runs in the pool, and key
// blocks past every row of the tile's causal limit are never read.
void sdpa_by_rows(const SdpaArgs& a, const int64_t* first, bool fast, int64_t tiles) {
  ThreadPool& pool = ThreadPool::instance();
  const int64_t group = a.Hq / a.Hkv;
  const int64_t rows = group * a.Lq;
  // The bf16 body's key blocks converted once for all the call's tiles (not by each tile):
  // block k of (b, hkv) at prepared + ((b * Hkv + hkv) * most + k) * words.
  const bool bf16 = runs_bf16(a, fast);
  int64_t most = 0;
  for (int64_t b = 0; bf16 && b < a.B; ++b) {
    most = std::max(most, (a.Lk - first[b] + KEY_BLOCK - 1) / KEY_BLOCK);
  }
  thread_local std::vector<uint32_t> converted;
  int64_t words = 0;
#if defined(VMLX_HAVE_AVX2) && defined(VMLX_HAVE_BF16)
  if (bf16) {
    words = bf16::block_words(a.D, KEY_BLOCK);
    converted.resize(std::max<int64_t>(1, a.B * a.Hkv * most * words));
    uint32_t* out = converted.data();
    pool.parallel_for(static_cast<int>(a.B * a.Hkv * most), [&](int t) {
      const int64_t b = t / (a.Hkv * most);
      const int64_t l0 = first[b] + (t % most) * KEY_BLOCK;
      if (l0 < a.Lk) {
        bf16::prepare(a, b, (t / most) % a.Hkv, l0, std::min(a.Lk, l0 + KEY_BLOCK), out + t * words);
      }
    });
  }
#endif
  const uint32_t* prepared = converted.data();
  pool.parallel_for(static_cast<int>(a.B * a.Hkv * tiles), [&](int t) {
    const int64_t b = t / (a.Hkv * tiles);
    const int64_t hkv = (t / tiles) % a.Hkv;
    const int64_t row0 = (t % tiles) * ROW_TILE;
    const int64_t row1 = std::min(rows, row0 + ROW_TILE);
    int64_t seen = a.Lk; // keys before this one are all any row of the tile may see
    if (a.causal) {
      int64_t last = 0; // the tile's last query position (rows wrap from head to head)
      for (int64_t row = row0; row < row1; ++row) {
        last = std::max(last, row % a.Lq);
      }
      seen = a.Lk - a.Lq + last + 1;
    }
    const int64_t n = row1 - row0;
    const int64_t stride = n * (a.D + 2);
    const int64_t blocks = (a.Lk - first[b] + KEY_BLOCK - 1) / KEY_BLOCK;
    thread_local std::vector<float> parts;
    parts.resize(std::max<int64_t>(1, blocks) * stride);
    int64_t count = 0;
    for (; count < blocks; ++count) {
      const int64_t l0 = first[b] + count * KEY_BLOCK;
      if (l0 >= seen) {
        break; // this block and the rest: past the causal limit of every row here
      }
      const uint32_t* block = bf16 ? prepared + ((b * a.Hkv + hkv) * most + count) * words : nullptr;
      run_task(a, fast, b, hkv, l0, std::min(a.Lk, l0 + KEY_BLOCK), parts.data() + count * stride, row0, row1, block);
    }
    for (int64_t row = row0; row < row1; ++row) {
      const int64_t h = hkv * group + row / a.Lq;
      float* out = a.out + ((b * a.Hq + h) * a.Lq + row % a.Lq) * a.D;
      merge_row(parts.data() + (row - row0) * (a.D + 2), stride, count, a.D, out);
    }
  });
}

} // namespace

void sdpa(const SdpaArgs& a) {
  thread_local std::vector<int64_t> first;
  first.resize(a.B);
  for (int64_t b = 0; b < a.B; ++b) {
    first[b] = first_key(a, b);
  }
  const bool fast = avx2_enabled() && a.q_strides[3] == 1 && a.k_strides[3] == 1 && a.v_strides[3] == 1;
  // Either way a sequence's keys split into blocks of KEY_BLOCK from its first, each row's
  // part of a block is its own arithmetic and the parts merge by merge_row: the same bits.
  const int64_t tiles = (a.Hq / a.Hkv * a.Lq + ROW_TILE - 1) / ROW_TILE;
  if (tiles > 1 && a.B * a.Hkv * tiles >= 4 * ThreadPool::instance().size()) {
    sdpa_by_rows(a, first.data(), fast, tiles);
  } else {
    sdpa_by_blocks(a, first.data(), fast);
  }
}

} // namespace vmlx
