// Product drivers: split the work into tasks for the pool and pick the instruction set and
// the activation, int16 and attention bodies once per process (sdpa.cpp drives attention).
// The generic bodies here are plain C++ the compiler vectorizes for the baseline ISA (SSE2
// on x86-64, NEON on arm64).
#include "kernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "threadpool.h"

namespace vmlx {

namespace {

bool cpu_has_avx2() {
#if defined(VMLX_HAVE_AVX2)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

std::atomic<bool>& avx2_selected() {
  static std::atomic<bool> selected{cpu_has_avx2()};
  return selected;
}

bool use_avx2() {
  return avx2_selected().load(std::memory_order_relaxed);
}

// How x is read (VLLM_MLX_NATIVE_ACTIVATIONS for the whole process): the largest integer
// a group of x is rounded to, 0 for the exact float body.
int activation_levels(const std::string& name) {
  return name == "float" ? 0 : name == "int8" ? 127 : name == "int16" ? 32767 : -1;
}

std::atomic<int>& int_levels() {
  static std::atomic<int> levels{[] {
    const char* env = std::getenv("VLLM_MLX_NATIVE_ACTIVATIONS");
    const int chosen = env == nullptr ? 32767 : activation_levels(env);
    return chosen < 0 ? 32767 : chosen;
  }()};
  return levels;
}

bool cpu_has_vnni() {
#if defined(VMLX_HAVE_VNNI)
  return vnni::supported();
#else
  return false;
#endif
}

std::atomic<bool>& vnni_selected() {
  static std::atomic<bool> selected{[] {
    const char* env = std::getenv("VLLM_MLX_NATIVE_VNNI");
    return cpu_has_vnni() && (env == nullptr || std::string(env) != "0");
  }()};
  return selected;
}

// Rows of the weight per task: a task should read at least ~32 KB of weights, so
// the pool's hand-off stays small next to the work, and a prefill task's weight
// block stays in L2 while every row of x passes over it.
int64_t rows_per_task(const QmmArgs& a, int threads) {
  int64_t row_bytes = a.K * a.bits / 8 + 2 * (a.K / a.group_size) * (a.scales_f16 ? 2 : 4);
  int64_t min_rows = std::max<int64_t>(1, (32 * 1024) / std::max<int64_t>(1, row_bytes));
  int64_t even = (a.N + 4 * threads - 1) / (4 * threads);
  int64_t rows = std::max(min_rows, even);
  if (a.M > 8) {
    rows = std::min<int64_t>(rows, std::max<int64_t>(8, (256 * 1024) / row_bytes));
  } else { // at most ~512 KB: the output projection's 32 MB in 62 tasks, not 8, so the
    // pool evens out a worker the OS parks for the Python thread's turn
    rows = std::min<int64_t>(rows, std::max<int64_t>(min_rows, (512 * 1024) / row_bytes));
  }
  return std::max<int64_t>(1, std::min(rows, a.N));
}

} // namespace

bool avx2_enabled() {
  return use_avx2();
}

const char* activations() {
  const int levels = int_levels().load();
  return levels == 0 ? "float" : levels == 127 ? "int8" : "int16";
}

bool set_activations(const char* name) {
  const int levels = activation_levels(name);
  if (levels < 0) {
    return false;
  }
  int_levels().store(levels);
  return true;
}

PackedMode packed_mode_named(const std::string& name) {
  return name == "1" ? PackedMode::on : name == "0" ? PackedMode::off : PackedMode::registered;
}

std::atomic<PackedMode>& packed_selected() {
  static std::atomic<PackedMode> selected{[] {
    const char* env = std::getenv("VLLM_MLX_NATIVE_PACKED");
    return packed_mode_named(env == nullptr ? "auto" : env);
  }()};
  return selected;
}

PackedMode packed_mode() {
  return packed_selected().load(std::memory_order_relaxed);
}

const char* packed_mode_name() {
  const PackedMode mode = packed_mode();
  return mode == PackedMode::on ? "1" : mode == PackedMode::off ? "0" : "auto";
}

bool set_packed_mode(const char* name) {
  const std::string s(name);
  if (s != "0" && s != "1" && s != "auto") {
    return false;
  }
  packed_selected().store(packed_mode_named(s));
  return true;
}

bool packed_products() {
  return packed_mode() != PackedMode::off && use_avx2() && vnni_selected().load(std::memory_order_relaxed) &&
      int_levels().load(std::memory_order_relaxed) != 0;
}

const char* int16_body() {
  return vnni_selected().load() ? "vnni" : "avx2";
}

bool set_int16_body(const char* name) {
  const std::string wanted(name);
  if (wanted == "avx2" || (wanted == "vnni" && cpu_has_vnni())) {
    vnni_selected().store(wanted == "vnni");
    return true;
  }
  return false;
}

#if !defined(VMLX_HAVE_BF16)
const char* attention_body() {
  return "float";
}

bool set_attention_body(const char* name) {
  return std::string(name) == "float";
}
#endif

const char* isa() {
  return use_avx2() ? "avx2" : "generic";
}

bool set_isa(const char* name) {
  const std::string wanted(name);
  if (wanted == "generic") {
    avx2_selected().store(false);
    return true;
  }
  if (wanted == "avx2" && cpu_has_avx2()) {
    avx2_selected().store(true);
    return true;
  }
  return false;
}

namespace generic {

namespace {

inline float scale_value(float s) {
  return s;
}

inline float scale_value(uint16_t s) {
  return half_to_float(s);
}

// S: float or uint16_t (half bits) scales and biases, one instantiation each so the
// inner loops carry no per-element branch.
template <typename S>
void qmm_rows_as(const QmmArgs& a, const S* scales, const S* biases, const float* xsum, int64_t n0, int64_t n1) {
  const int64_t groups = a.K / a.group_size;
  const int64_t words = a.K * a.bits / 32;
  const uint32_t mask = (1u << a.bits) - 1u;
  const int per_word = 32 / a.bits;
  std::vector<float> q(a.group_size);
  std::vector<float> acc(a.M);
  for (int64_t n = n0; n < n1; ++n) {
    const uint32_t* wrow = a.w + n * words;
    const S* srow = scales + n * groups;
    const S* brow = biases + n * groups;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t g = 0; g < groups; ++g) {
      const uint32_t* wg = wrow + g * a.group_size / per_word;
      for (int j = 0; j < a.group_size; ++j) {
        q[j] = static_cast<float>((wg[j / per_word] >> ((j % per_word) * a.bits)) & mask);
      }
      const float scale = scale_value(srow[g]);
      const float bias = scale_value(brow[g]);
      for (int64_t m = 0; m < a.M; ++m) {
        const float* xg = a.x + m * a.K + g * a.group_size;
        float dot = 0.0f;
        for (int j = 0; j < a.group_size; ++j) {
          dot += q[j] * xg[j];
        }
        acc[m] += scale * dot + bias * xsum[m * groups + g];
      }
    }
    for (int64_t m = 0; m < a.M; ++m) {
      a.y[m * a.N + n] = acc[m];
    }
  }
}

template <typename S>
void dequantize_rows_as(const QmmArgs& a, const S* scales, const S* biases, int64_t n0, int64_t n1) {
  const int64_t groups = a.K / a.group_size;
  const int64_t words = a.K * a.bits / 32;
  const uint32_t mask = (1u << a.bits) - 1u;
  const int per_word = 32 / a.bits;
  for (int64_t n = n0; n < n1; ++n) {
    for (int64_t g = 0; g < groups; ++g) {
      const float scale = scale_value(scales[n * groups + g]);
      const float bias = scale_value(biases[n * groups + g]);
      for (int64_t k = g * a.group_size; k < (g + 1) * a.group_size; ++k) {
        const uint32_t q = (a.w[n * words + k / per_word] >> ((k % per_word) * a.bits)) & mask;
        a.y[n * a.K + k] = static_cast<float>(q) * scale + bias;
      }
    }
  }
}

} // namespace

void qmm_rows(const QmmArgs& a, const float* xsum, int64_t n0, int64_t n1) {
  if (a.scales_f16 != nullptr) {
    qmm_rows_as(a, a.scales_f16, a.biases_f16, xsum, n0, n1);
  } else {
    qmm_rows_as(a, a.scales, a.biases, xsum, n0, n1);
  }
}

void dequantize_rows(const QmmArgs& a, int64_t n0, int64_t n1) {
  if (a.scales_f16 != nullptr) {
    dequantize_rows_as(a, a.scales_f16, a.biases_f16, n0, n1);
  } else {
    dequantize_rows_as(a, a.scales, a.biases, n0, n1);
  }
}


} // namespace generic

void qmm(const QmmArgs& a) {
  qmm_many(&a, 1);
}

namespace {

// The task layout of one fork-join over several projections: task t -> (projection j,
// rows [n0, n1)). One per calling thread, reused: a decode step plans ~120 of these.
struct Tasks {
  std::vector<int64_t> first, rows;

  // align: each task's rows a multiple of it (the packed body's 16-row tiles)
  const Tasks& plan(const QmmArgs* list, int count, int threads, int64_t align = 1) {
    first.assign(count + 1, 0);
    rows.resize(count);
    for (int j = 0; j < count; ++j) {
      rows[j] = (rows_per_task(list[j], threads) + align - 1) / align * align;
      first[j + 1] = first[j] + (list[j].N + rows[j] - 1) / rows[j];
    }
    return *this;
  }

  int count() const {
    return static_cast<int>(first.back());
  }

  // (projection, n0, n1) of task t
  void locate(const QmmArgs* list, int t, int& j, int64_t& n0, int64_t& n1) const {
    j = 0;
    while (t >= first[j + 1]) {
      ++j;
    }
    n0 = (t - first[j]) * rows[j];
    n1 = std::min(list[j].N, n0 + rows[j]);
  }
};

#if defined(VMLX_HAVE_AVX2)
using Int16Body = void (*)(const QmmArgs&, const avx2::Int16X*, int64_t, int64_t, int64_t);

Int16Body vnni_body() {
#if defined(VMLX_HAVE_VNNI)
  return vnni::qmm_rows_int16;
#else
  return avx2::qmm_rows_int16; // never selected: cpu_has_vnni() is false
#endif
}

Int16Body packed_body() {
#if defined(VMLX_HAVE_VNNI)
  return vnni::qmm_rows_packed;
#else
  return avx2::qmm_rows_int16; // never selected: no packed copies without VNNI
#endif
}

// Rows of x (decode rows, one per sequence, or a prefill block's) through the int16 body;
// false when x is not finite (then the float body runs). Each task unpacks each of its
// weight rows once for up to 4 rows of x (further blocks of 4 read it again from L2),
// and each output is the one-row product's, bit for bit: neither batching nor the
// number of rows in a prefill block changes a sequence's numbers.
bool qmm_many_int16(const QmmArgs* list, int count) {
  const QmmArgs& a = list[0];
  const int64_t groups = a.K / a.group_size;
  const int64_t per_row = avx2::INT16_ROWS * groups;
  thread_local std::vector<int16_t> q;
  thread_local std::vector<float> scale, sum;
  thread_local std::vector<avx2::Int16X> rows;
  const int levels = int_levels().load(std::memory_order_relaxed);
  const bool vnni = vnni_selected().load(std::memory_order_relaxed);
#if defined(VMLX_HAVE_VNNI)
  const bool packed = vnni && std::all_of(list, list + count, [](const QmmArgs& p) { return p.packed != nullptr; });
#else
  const bool packed = false;
#endif
  if (packed) {
    std::for_each(list, list + count, ensure_packed);
  }
  const avx2::XOrder order = packed ? avx2::XOrder::natural : vnni ? avx2::XOrder::pairs : avx2::XOrder::chunks;
  q.resize(a.M * a.K);
  scale.resize(a.M * per_row);
  sum.resize(a.M * per_row);
  rows.resize(a.M);
  for (int64_t m = 0; m < a.M; ++m) {
    rows[m] = {q.data() + m * a.K, scale.data() + m * per_row, sum.data() + m * per_row};
    if (!avx2::quantize_int16(a.x + m * a.K, a.K, a.group_size, a.bits, levels, order, rows[m])) {
      return false;
    }
  }
  ThreadPool& pool = ThreadPool::instance();
  thread_local Tasks plans;
  // thread_local: the tasks run on other threads, so hand them what this thread's hold
  const Tasks& tasks = plans.plan(list, count, pool.size(), packed ? 16 : 1);
  const avx2::Int16X* xs = rows.data();
  const auto body = packed ? packed_body() : vnni ? vnni_body() : avx2::qmm_rows_int16;
  pool.parallel_for(tasks.count(), [&](int t) {
    int j;
    int64_t n0, n1;
    tasks.locate(list, t, j, n0, n1);
    body(list[j], xs, a.M, n0, n1);
  });
  return true;
}
#endif

} // namespace

void qmm_many(const QmmArgs* list, int count) {
  const QmmArgs& a = list[0];
#if defined(VMLX_HAVE_AVX2)
  if (use_avx2() && int_levels().load(std::memory_order_relaxed) != 0 && a.group_size % 32 == 0 &&
      qmm_many_int16(list, count)) {
    return;
  }
#endif
  const int64_t groups = a.K / a.group_size;
  // sum of each group of x, for the bias term: sum_k (q s + b) x = s q.x + b sum(x)
  thread_local std::vector<float> xsum; // reused: a decode step runs ~200 of these
  xsum.resize(a.M * groups);
  for (int64_t m = 0; m < a.M; ++m) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* xg = a.x + m * a.K + g * a.group_size;
      float s = 0.0f;
      for (int j = 0; j < a.group_size; ++j) {
        s += xg[j];
      }
      xsum[m * groups + g] = s;
    }
  }
  const bool fast = use_avx2();
  thread_local std::vector<float> x_perm;
  x_perm.clear();
  if (fast && a.bits == 4) {
    x_perm.resize(a.M * a.K);
    for (int64_t m = 0; m < a.M; ++m) {
      for (int64_t k0 = 0; k0 < a.K; k0 += 32) {
        const float* src = a.x + m * a.K + k0;
        float* dst = x_perm.data() + m * a.K + k0;
        for (int half = 0; half < 32; half += 16) { // avx2::unpack32's element order
          for (int j = 0; j < 8; ++j) {
            dst[half + j] = src[half + 2 * j];
            dst[half + 8 + j] = src[half + 2 * j + 1];
          }
        }
      }
    }
  }
  ThreadPool& pool = ThreadPool::instance();
  thread_local Tasks plans;
  // thread_local buffers: the tasks run on other threads, so hand them references
  const Tasks& tasks = plans.plan(list, count, pool.size());
  const float* xp = x_perm.empty() ? nullptr : x_perm.data();
  const float* xs = xsum.data();
  pool.parallel_for(tasks.count(), [&](int t) {
    int j;
    int64_t n0, n1;
    tasks.locate(list, t, j, n0, n1);
    const QmmArgs& p = list[j];
#if defined(VMLX_HAVE_AVX2)
    if (fast) {
      avx2::qmm_rows(p, xp, xs, n0, n1);
      return;
    }
#endif
    generic::qmm_rows(p, xs, n0, n1);
  });
}

void dequantize_weights(const QmmArgs& a) {
  ThreadPool& pool = ThreadPool::instance();
  const int64_t rows = std::max<int64_t>(1, (a.N + 4 * pool.size() - 1) / (4 * pool.size()));
  const bool fast = use_avx2();
  pool.parallel_for(static_cast<int>((a.N + rows - 1) / rows), [&](int t) {
    const int64_t n0 = t * rows;
    const int64_t n1 = std::min(a.N, n0 + rows);
#if defined(VMLX_HAVE_AVX2)
    if (fast) {
      avx2::dequantize_rows(a, n0, n1);
      return;
    }
#endif
    generic::dequantize_rows(a, n0, n1);
  });
}

} // namespace vmlx
