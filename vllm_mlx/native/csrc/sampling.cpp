#include "sampling.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "mlx/backend/cpu/encoder.h"
#include "strided.h"
#include "threadpool.h"

namespace vmlx {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Entries bucketed by top - x (its float bits order like -x): the one bucket holding a
// threshold is found from per-bucket sums, and only its entries are selected among.
constexpr int kBucketShift = 18; // 8192 buckets, 2^(1/32) apart in top - x
constexpr int kBuckets = 1 << (32 - 1 - kBucketShift);

inline uint32_t bucket_of(float x, float top) {
  return std::bit_cast<uint32_t>(top - x) >> kBucketShift; // top - x >= 0 or +inf
}

// Scratch reused across rows and calls on a thread: no allocation per token.
struct Scratch {
  std::vector<float> vals, probs, weights;
  std::vector<uint32_t> index, candidates;
  std::vector<double> mass;
  std::vector<uint32_t> count;
};

Scratch& scratch(int64_t V) {
  thread_local Scratch s;
  if (static_cast<int64_t>(s.weights.size()) < V) {
    s.vals.resize(V);
    s.probs.resize(V);
    s.weights.resize(V);
    s.index.resize(V);
    s.candidates.resize(V);
    s.mass.resize(kBuckets);
    s.count.resize(kBuckets);
  }
  return s;
}

float max_of(const float* x, int64_t V) {
#if defined(VMLX_HAVE_AVX2)
  if (avx2_enabled()) {
    return avx2::max_of(x, V);
  }
#endif
  float top = kNegInf;
  for (int64_t j = 0; j < V; ++j) {
    top = std::max(top, x[j]);
  }
  return top;
}

double masked_weights(const float* x, float* w, int64_t V, float top, float floor, float inv_temp) {
#if defined(VMLX_HAVE_AVX2)
  if (avx2_enabled()) {
    return avx2::masked_weights(x, w, V, top, floor, inv_temp);
  }
#endif
  double sum = 0.0;
  for (int64_t j = 0; j < V; ++j) {
    w[j] = (x[j] >= floor && x[j] != kNegInf) ? std::exp((x[j] - top) * inv_temp) : 0.0f;
    sum += w[j];
  }
  return sum;
}

// apply_top_p's threshold without a sort: sorted ascending, mlx-lm drops the entries whose
// mass strictly above them is >= top_p * total and keeps every value >= the first one left.
// That value is the smallest v with mass(x > v) < top_p * total (ties do not matter). A
// histogram of the entries' mass over buckets of top - x (its float bits, which order like
// x itself) finds the one bucket holding it; a three-way quickselect on that bucket's
// entries, carrying their probabilities, finds it there.
float top_p_threshold(const float* x, int64_t V, float top, float top_p, Scratch& s) {
  float* p = s.weights.data();
  const double total = masked_weights(x, p, V, top, kNegInf, 1.0f);
  const double limit = static_cast<double>(top_p) * total;
  std::vector<double>& mass = s.mass;
  std::vector<uint32_t>& count = s.count;
  std::fill(mass.begin(), mass.end(), 0.0);
  std::fill(count.begin(), count.end(), 0u);
  for (int64_t j = 0; j < V; ++j) {
    const uint32_t k = bucket_of(x[j], top);
    mass[k] += p[j];
    count[k] += x[j] != kNegInf;
  }
  double above = 0.0; // mass of the entries greater than every candidate left
  uint32_t chosen = 0; // the last bucket with less than `limit` above it
  for (uint32_t k = 0; k < kBuckets; ++k) {
    if (count[k] == 0) {
      continue;
    }
    if (above >= limit) {
      break;
    }
    chosen = k;
    above += mass[k];
  }
  above -= mass[chosen];
  int64_t n = 0;
  for (int64_t j = 0; j < V; ++j) {
    if (x[j] != kNegInf && bucket_of(x[j], top) == chosen) {
      s.vals[n] = x[j];
      s.probs[n] = p[j];
      ++n;
    }
  }
  float best = s.vals[0]; // replaced by the bucket's largest value, which is kept
  for (int64_t i = 1; i < n; ++i) {
    best = std::max(best, s.vals[i]);
  }
  int64_t lo = 0, hi = n;
  uint64_t state = 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(n);
  float* vals = s.vals.data();
  float* probs = s.probs.data();
  while (lo < hi) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17; // xorshift pivot
    const float pivot = vals[lo + static_cast<int64_t>(state % static_cast<uint64_t>(hi - lo))];
    // [lo, a) > pivot, [a, i) == pivot, [b, hi) < pivot
    int64_t a = lo, i = lo, b = hi;
    double greater = 0.0, equal = 0.0;
    while (i < b) {
      const float v = vals[i];
      if (v > pivot) {
        greater += probs[i];
        std::swap(vals[i], vals[a]);
        std::swap(probs[i], probs[a]);
        ++a, ++i;
      } else if (v < pivot) {
        --b;
        std::swap(vals[i], vals[b]);
        std::swap(probs[i], probs[b]);
      } else {
        equal += probs[i];
        ++i;
      }
    }
    if (above + greater < limit) {
      best = pivot; // kept; look for a smaller value that still is
      above += greater + equal;
      lo = b;
    } else {
      hi = a; // dropped: the threshold is above it
    }
  }
  return best;
}

// apply_top_k on the entries kept so far (x >= floor, finite): when more than k, their k
// largest (ties: the lower index, as MLX's argpartition orders them) into s.index in index
// order, returning k; else 0 (top_k keeps them all).
int64_t top_k_set(const float* x, int64_t V, float top, float floor, int k, Scratch& s) {
  std::vector<uint32_t>& count = s.count;
  std::fill(count.begin(), count.end(), 0u);
  int64_t kept = 0;
  for (int64_t j = 0; j < V; ++j) {
    if (x[j] >= floor && x[j] != kNegInf) {
      ++count[bucket_of(x[j], top)];
      ++kept;
    }
  }
  if (kept <= k) {
    return 0;
  }
  int64_t before = 0; // entries in buckets above the one holding the k-th
  uint32_t chosen = 0;
  for (; chosen < kBuckets && before + count[chosen] < static_cast<uint32_t>(k); ++chosen) {
    before += count[chosen];
  }
  uint32_t* idx = s.index.data();
  int64_t sure = 0, n = 0; // idx[0, sure): above the bucket; candidates: in it
  uint32_t* candidates = s.candidates.data();
  for (int64_t j = 0; j < V; ++j) {
    if (x[j] >= floor && x[j] != kNegInf) {
      const uint32_t b = bucket_of(x[j], top);
      if (b < chosen) {
        idx[sure++] = static_cast<uint32_t>(j);
      } else if (b == chosen) {
        candidates[n++] = static_cast<uint32_t>(j);
      }
    }
  }
  const int64_t need = k - sure;
  std::nth_element(candidates, candidates + need - 1, candidates + n, [x](uint32_t i, uint32_t j) {
    return x[i] > x[j] || (x[i] == x[j] && i < j);
  });
  std::copy(candidates, candidates + need, idx + sure);
  std::sort(idx, idx + k);
  return k;
}

// 53 bits of the two words as a double in [0, 1).
double uniform(uint32_t a, uint32_t b) {
  return (static_cast<double>(a >> 5) * 67108864.0 + static_cast<double>(b >> 6)) * (1.0 / 9007199254740992.0);
}

} // namespace

uint32_t sample_row(const float* x, int64_t V, uint32_t a, uint32_t b, const SampleArgs& args) {
  const float top = max_of(x, V);
  if (!std::isfinite(top)) { // all -inf, +inf or nan somewhere: the first maximum, as argmax
    return static_cast<uint32_t>(std::max_element(x, x + V) - x);
  }
  Scratch& s = scratch(V);
  float floor = kNegInf;
  if (args.top_p > 0.0f && args.top_p < 1.0f) {
    floor = top_p_threshold(x, V, top, args.top_p, s);
  }
  if (args.min_p > 0.0f) { // apply_min_p's float32 sum of the max and log(min_p)
    floor = std::max(floor, top + static_cast<float>(std::log(static_cast<double>(args.min_p))));
  }
  const double u = uniform(a, b);
  if (args.top_k > 0 && args.top_k < V) {
    const int64_t k = top_k_set(x, V, top, floor, args.top_k, s);
    if (k > 0) {
      const uint32_t* idx = s.index.data();
      double total = 0.0;
      for (int64_t i = 0; i < k; ++i) {
        s.weights[i] = std::exp((x[idx[i]] - top) * args.inv_temp);
        total += s.weights[i];
      }
      const double target = u * total;
      double cumulative = 0.0;
      for (int64_t i = 0; i < k; ++i) {
        cumulative += s.weights[i];
        if (cumulative > target) {
          return idx[i];
        }
      }
      return idx[k - 1];
    }
  }
  float* w = s.weights.data();
  const double total = masked_weights(x, w, V, top, floor, args.inv_temp);
  const double target = u * total;
  double cumulative = 0.0;
  int64_t last = 0;
  for (int64_t j = 0; j < V; ++j) {
    if (w[j] > 0.0f) {
      cumulative += w[j];
      last = j;
      if (cumulative > target) {
        return static_cast<uint32_t>(j);
      }
    }
  }
  return static_cast<uint32_t>(last); // rounding left the target at the total
}

mx::array sample(const mx::array& logprobs, const mx::array& bits, SampleArgs args) {
  require(logprobs.dtype() == mx::float32 && logprobs.ndim() == 2 && logprobs.shape(1) > 0,
          "logprobs must be float32 [B, V > 0]");
  require(bits.dtype() == mx::uint32 && bits.ndim() == 2 && bits.shape(0) == logprobs.shape(0) &&
              bits.shape(1) == 2,
          "bits must be uint32 [B, 2]");
  require(std::isfinite(args.inv_temp) && args.inv_temp > 0.0f, "inv_temp must be finite and > 0");
  require(!(args.top_p < 0.0f) && !(args.top_p > 1.0f), "top_p must be in [0, 1]");
  require(!(args.min_p < 0.0f) && !(args.min_p > 1.0f), "min_p must be in [0, 1]");
  return mx::array(
      {logprobs.shape(0)},
      mx::uint32,
      std::make_shared<SampleRows>(cpu_stream(), args),
      {logprobs, mx::contiguous(bits, false, cpu_stream())});
}

void SampleRows::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& encoder = mx::cpu::get_command_encoder(stream());
  const mx::array x = packed_input(inputs[0], encoder);
  const mx::array& bits = inputs[1];
  auto& out = outputs[0];
  out.set_data(mx::allocator::malloc(out.nbytes()));
  const int64_t V = x.shape(1);
  const int64_t rows = x.shape(0);
  encoder.set_input_array(x);
  encoder.set_input_array(bits);
  encoder.set_output_array(out);
  encoder.dispatch([src = x.data<float>(), words = bits.data<uint32_t>(), dst = out.data<uint32_t>(), rows, V,
                    args = args_]() {
    // a row per task: each row's draw reads its own logits and words (and its thread's
    // scratch), so a batch's rows are drawn side by side with the same results
    ThreadPool::instance().parallel_for(static_cast<int>(rows), [&](int r) {
      dst[r] = sample_row(src + r * V, V, words[2 * r], words[2 * r + 1], args);
    });
  });
}

void SampleRows::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  cpu_only();
}

bool SampleRows::is_equivalent(const mx::Primitive& other) const {
  const SampleArgs& o = static_cast<const SampleRows&>(other).args_;
  return o.top_p == args_.top_p && o.min_p == args_.min_p && o.top_k == args_.top_k && o.inv_temp == args_.inv_temp;
}

std::vector<mx::Shape> SampleRows::output_shapes(const std::vector<mx::array>& inputs) {
  return {{inputs[0].shape(0)}};
}

} // namespace vmlx
