// A sampled token per row in one pass over the vocabulary, instead of MLX's CPU ops (a
// full sort for top-p, Gumbel noise with two one-lane logs per entry: ~6-27 ms a token
// over a 49k vocabulary). The filters are mlx-lm's (sample_utils.apply_top_p, apply_min_p,
// apply_top_k, in that order, on the untempered log-probabilities), then the temperature;
// the token is drawn by inverse CDF from one 53-bit uniform per row.
#pragma once

#include <cstdint>

#include "primitives.h"

namespace vmlx {

struct SampleArgs {
  float top_p; // kept when in (0, 1)
  float min_p; // kept when > 0
  int top_k; // kept when in (0, V)
  float inv_temp; // 1 / temperature (> 0)
};

// The token of row x[0, V) for uniform bits (a, b); the kernel under `sample`.
uint32_t sample_row(const float* x, int64_t V, uint32_t a, uint32_t b, const SampleArgs& args);

// uint32 [B]: one token per row of float32 log-probabilities [B, V], each drawn with the
// row's two uint32 random words bits [B, 2].
mx::array sample(const mx::array& logprobs, const mx::array& bits, SampleArgs args);

class SampleRows : public mx::Primitive {
 public:
  SampleRows(mx::Stream stream, SampleArgs args) : mx::Primitive(stream), args_(args) {}
  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  void eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override;
  const char* name() const override {
    return "VllmMlxSampleRows";
  }
  bool is_equivalent(const mx::Primitive& other) const override;
  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override;

 private:
  SampleArgs args_;
};

namespace avx2 {
// w[j] = exp((x[j] - top) * inv_temp) where x[j] >= floor and x[j] > -inf, else 0;
// returns their sum in double (per-lane partial sums).
double masked_weights(const float* x, float* w, int64_t n, float top, float floor, float inv_temp);
// p[j] = exp(x[j] - top) for the finite entries (-inf: 0); returns the sum.
double probabilities(const float* x, float* p, int64_t n, float top);
float max_of(const float* x, int64_t n);
} // namespace avx2

} // namespace vmlx
