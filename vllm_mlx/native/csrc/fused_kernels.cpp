#include "fused_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels.h"
#include "threadpool.h"

namespace vmlx {

void rms_norm(const float* x, const float* w, float* y, int64_t M, int64_t D, float eps) {
  for (int64_t m = 0; m < M; ++m) {
    const float* row = x + m * D;
    // eight sums (element d in sum d % 8) added in a fixed tree: one chain of D adds
    // waited on each add's latency, on the caller while the pool's workers idle
    float part[8] = {};
    int64_t d = 0;
    for (; d + 8 <= D; d += 8) {
      for (int j = 0; j < 8; ++j) {
        part[j] += row[d + j] * row[d + j];
      }
    }
    for (int j = 0; d < D; ++d, ++j) {
      part[j] += row[d] * row[d];
    }
    const float sum = ((part[0] + part[4]) + (part[2] + part[6])) + ((part[1] + part[5]) + (part[3] + part[7]));
    const float inv = 1.0f / std::sqrt(sum / static_cast<float>(D) + eps);
    float* out = y + m * D;
    for (int64_t i = 0; i < D; ++i) {
      out[i] = (row[i] * inv) * w[i];
    }
  }
}

RopeArgs rope_heads(const float* src, float* dst, int64_t B, int64_t H, int64_t L, int64_t Dh) {
  RopeArgs a{};
  a.x = src;
  a.y = dst;
  a.B = B;
  a.H = H;
  a.L = L;
  a.D = Dh;
  a.strides[0] = L * H * Dh;
  a.strides[1] = Dh;
  a.strides[2] = H * Dh;
  a.strides[3] = 1;
  return a;
}

void rope(const RopeArgs& a) {
  const int half = a.dims / 2;
  std::vector<float> cos_t(half), sin_t(half);
  for (int64_t b = 0; b < a.B; ++b) {
    const int64_t start = a.offsets != nullptr ? a.offsets[b] : a.offset;
    for (int64_t l = 0; l < a.L; ++l) {
      const float position = static_cast<float>(start + l) * a.scale;
      for (int i = 0; i < half; ++i) {
        const float theta = position * a.inv_freq[i];
        cos_t[i] = std::cos(theta);
        sin_t[i] = std::sin(theta);
      }
      for (int64_t h = 0; h < a.H; ++h) {
        const float* x = a.x + b * a.strides[0] + h * a.strides[1] + l * a.strides[2];
        const int64_t s = a.strides[3];
        float* y = a.y + ((b * a.H + h) * a.L + l) * a.D;
        for (int i = 0; i < half; ++i) {
          const int64_t i1 = a.traditional ? 2 * i : i;
          const int64_t i2 = a.traditional ? 2 * i + 1 : i + half;
          const float x1 = x[i1 * s];
          const float x2 = x[i2 * s];
          y[i1] = x1 * cos_t[i] - x2 * sin_t[i];
          y[i2] = x1 * sin_t[i] + x2 * cos_t[i];
        }
        for (int64_t d = a.dims; d < a.D; ++d) {
          y[d] = x[d * s];
        }
      }
    }
  }
}

void silu_mul(const float* g, const float* u, float* y, int64_t n) {
#if defined(VMLX_HAVE_AVX2)
  if (avx2_enabled()) {
    avx2::silu_mul(g, u, y, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) {
    const float sigmoid = 1.0f / (1.0f + std::exp(-g[i]));
    y[i] = g[i] * sigmoid * u[i];
  }
}

namespace {

void softmax_row(float* s, int64_t n, int64_t width) {
  float max_score = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    max_score = std::max(max_score, s[j]);
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - max_score);
    sum += s[j];
  }
  for (int64_t j = 0; j < n; ++j) {
    s[j] /= sum;
  }
  std::fill(s + n, s + width, 0.0f);
}

float logsumexp_row(const float* x, int64_t n) {
  float top = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    if (std::isnan(x[j])) {
      return x[j];
    }
    top = std::max(top, x[j]);
  }
  if (std::isinf(top)) {
    return top;
  }
  double sum = 0.0; // one float running sum over a 49k vocabulary errs ~1e-5
  for (int64_t j = 0; j < n; ++j) {
    sum += std::exp(x[j] - top);
  }
  return top + static_cast<float>(std::log(sum));
}

} // namespace

void logsumexp_rows(const float* x, float* out, int64_t rows, int64_t width) {
  ThreadPool& pool = ThreadPool::instance();
  const int64_t per_task = std::max<int64_t>(1, rows / (4 * pool.size()));
  const bool fast = avx2_enabled();
  pool.parallel_for(static_cast<int>((rows + per_task - 1) / per_task), [&](int t) {
    for (int64_t r = t * per_task; r < std::min(rows, (t + 1) * per_task); ++r) {
#if defined(VMLX_HAVE_AVX2)
      if (fast) {
        out[r] = avx2::logsumexp_row(x + r * width, width);
        continue;
      }
#endif
      out[r] = logsumexp_row(x + r * width, width);
    }
  });
}

void softmax_causal(float* s, int64_t rows, int64_t width, int64_t period, int64_t offset) {
  ThreadPool& pool = ThreadPool::instance();
  const int64_t per_task = std::max<int64_t>(1, rows / (4 * pool.size()));
  const bool fast = avx2_enabled();
  pool.parallel_for(static_cast<int>((rows + per_task - 1) / per_task), [&](int t) {
    for (int64_t r = t * per_task; r < std::min(rows, (t + 1) * per_task); ++r) {
      const int64_t n = std::clamp<int64_t>(offset + r % period + 1, 1, width);
#if defined(VMLX_HAVE_AVX2)
      if (fast) {
        avx2::softmax_row(s + r * width, n, width);
        continue;
      }
#endif
      softmax_row(s + r * width, n, width);
    }
  });
}

} // namespace vmlx
