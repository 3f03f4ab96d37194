// The packed copies of quantized weights (the layout is in kernels.h): an entry made
// when a product of the arrays is planned while packed products are on, filled by that
// product's task, and kept with the arrays themselves for the process, so an address in
// the cache always names the same weights (an array freed and its memory reused could
// otherwise find another array's copy). The copy doubles a model's weight memory: the
// switch is opt-in.
#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <map>
#include <tuple>
#include <vector>

#include "kernels.h"
#include "primitives.h"

namespace vmlx {

namespace {

int64_t packed_weight_bytes(const QmmArgs& a) {
  return (a.N + 15) / 16 * 16 * a.K * a.bits / 8;
}

int64_t packed_scale_count(const QmmArgs& a) {
  return (a.N + 15) / 16 * (a.K / a.group_size) * 16;
}

// a's weights into w and the scale and bias entries (S: a's scale type).
template <typename S>
void pack_weights(const QmmArgs& a, uint8_t* w, S* scales, S* biases) {
  const S* from_scales = a.scales_f16 ? reinterpret_cast<const S*>(a.scales_f16) : reinterpret_cast<const S*>(a.scales);
  const S* from_biases = a.biases_f16 ? reinterpret_cast<const S*>(a.biases_f16) : reinterpret_cast<const S*>(a.biases);
  const int64_t groups = a.K / a.group_size;
  const int64_t tiles = (a.N + 15) / 16;
  const int per_word = 32 / a.bits;
  const uint32_t mask = (1u << a.bits) - 1u;
  const int64_t words = a.K / per_word;
  const int64_t chunk_bytes = 16 * 32 * a.bits / 8;
  std::fill(w, w + packed_weight_bytes(a), uint8_t{0});
  for (int64_t t = 0; t < tiles; ++t) {
    for (int i = 0; i < 16 && t * 16 + i < a.N; ++i) {
      const int64_t n = t * 16 + i;
      const uint32_t* row = a.w + n * words;
      for (int64_t k0 = 0; k0 < a.K; k0 += 32) { // chunk k0 / 32 of the row
        uint8_t* block = w + (t * (a.K / 32) + k0 / 32) * chunk_bytes;
        const auto q = [&](int64_t e) { return (row[(k0 + e) / per_word] >> (((k0 + e) % per_word) * a.bits)) & mask; };
        for (int p = 0; p < 16; ++p) { // weights 2p, 2p + 1
          const int j = a.bits == 4 ? p / 4 : p / 2;
          const int shift = a.bits == 4 ? 4 * (p % 4) : 8 * (p % 2);
          uint32_t dword;
          std::memcpy(&dword, block + 64 * j + 4 * i, 4);
          dword |= q(2 * p) << shift | q(2 * p + 1) << (16 + shift);
          std::memcpy(block + 64 * j + 4 * i, &dword, 4);
        }
      }
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t from = n * groups + g;
        scales[(t * groups + g) * 16 + i] = from_scales[from];
        biases[(t * groups + g) * 16 + i] = from_biases[from];
      }
    }
    for (int i = static_cast<int>(std::min<int64_t>(16, a.N - t * 16)); i < 16; ++i) {
      for (int64_t g = 0; g < groups; ++g) {
        scales[(t * groups + g) * 16 + i] = S{0}; // +0 in float and in half bits
        biases[(t * groups + g) * 16 + i] = S{0};
      }
    }
  }
}

struct Copy {
  mx::array w, scales, biases; // kept: their addresses key the cache
  PackedWeights packed;
};

} // namespace

void ensure_packed(const QmmArgs& a) {
  PackedWeights& p = *a.packed;
  std::call_once(p.filled, [&] {
    p.bytes.resize(packed_weight_bytes(a));
    const int64_t entries = packed_scale_count(a);
    if (a.scales_f16 != nullptr) {
      p.scale_halves.resize(entries);
      p.bias_halves.resize(entries);
      pack_weights(a, p.bytes.data(), p.scale_halves.data(), p.bias_halves.data());
      p.scales_f16 = p.scale_halves.data();
      p.biases_f16 = p.bias_halves.data();
    } else {
      p.scale_values.resize(entries);
      p.bias_values.resize(entries);
      pack_weights(a, p.bytes.data(), p.scale_values.data(), p.bias_values.data());
      p.scales = p.scale_values.data();
      p.biases = p.bias_values.data();
    }
    p.w = p.bytes.data();
  });
}

PackedWeights* packed_copy(const mx::array& w, const mx::array& scales, const mx::array& biases, const QmmArgs& a) {
  // every entry stays (a pending product may hold its pointer); the key names the
  // weights completely while the entry keeps the arrays alive
  using Key = std::tuple<const void*, const void*, const void*, int64_t, int64_t, int, int>;
  static std::mutex mutex;
  static std::map<Key, std::unique_ptr<Copy>> copies;
  const std::lock_guard<std::mutex> lock(mutex);
  auto& copy = copies[Key{a.w, scales.data<void>(), biases.data<void>(), a.N, a.K, a.group_size, a.bits}];
  if (copy == nullptr) {
    copy.reset(new Copy{w, scales, biases, {}});
  }
  return &copy->packed;
}

} // namespace vmlx
