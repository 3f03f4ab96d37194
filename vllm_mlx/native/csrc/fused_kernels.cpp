#include "fused_kernels.h"

#include <cmath>
#include <vector>

namespace vmlx {

void rms_norm(const float* x, const float* w, float* y, int64_t M, int64_t D, float eps) {
  for (int64_t m = 0; m < M; ++m) {
    const float* row = x + m * D;
    float sum = 0.0f;
    for (int64_t d = 0; d < D; ++d) {
      sum += row[d] * row[d];
    }
    const float inv = 1.0f / std::sqrt(sum / static_cast<float>(D) + eps);
    float* out = y + m * D;
    for (int64_t d = 0; d < D; ++d) {
      out[d] = (row[d] * inv) * w[d];
    }
  }
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
  for (int64_t i = 0; i < n; ++i) {
    const float sigmoid = 1.0f / (1.0f + std::exp(-g[i]));
    y[i] = g[i] * sigmoid * u[i];
  }
}

} // namespace vmlx
