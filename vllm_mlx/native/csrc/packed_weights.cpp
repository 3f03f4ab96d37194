// The packed copies of quantized weights (the layout is in kernels.h): an entry made
// when a product of the arrays is planned (packed products on) or when a model's
// weights are registered (auto), filled by the first product's task. An entry holds
// only weak references to the arrays' buffers, so the copy dies with its weights: a
// product's buffers are held until its task has run (MLX's CPU eval), so an entry is
// never dropped under a pending product, and an entry whose buffers are gone never
// matches new arrays at the same addresses (weak references compare by owner).
#include <algorithm>
#include <atomic>
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

std::atomic<int64_t> filled_bytes{0}; // of every live copy

int64_t copy_bytes(const PackedWeights& p) {
  return static_cast<int64_t>(
      p.bytes.size() + 4 * (p.scale_values.size() + p.bias_values.size()) +
      2 * (p.scale_halves.size() + p.bias_halves.size()));
}

using Data = std::weak_ptr<mx::array::Data>;

bool same_owner(const Data& a, const std::shared_ptr<mx::array::Data>& b) {
  return !a.owner_before(b) && !b.owner_before(a);
}

struct Copy {
  Data w, scales, biases; // the arrays' buffers, not kept
  PackedWeights packed;
  ~Copy() {
    filled_bytes -= copy_bytes(packed); // no task can be filling it: its buffers are gone
  }
  bool expired() const {
    return w.expired() || scales.expired() || biases.expired();
  }
};

using Key = std::tuple<const void*, const void*, const void*, int64_t, int64_t, int, int>;
using Copies = std::multimap<Key, std::unique_ptr<Copy>>;

struct Cache {
  std::mutex mutex;
  Copies copies;
  Copies::iterator next = copies.end(); // the entry the next lookup checks for expiry

  static Cache& instance() {
    static Cache cache;
    return cache;
  }

  // One entry checked per lookup: a running model's lookups drop a freed model's
  // copies within about a step; sweep() drops them all at once.
  void check_one() {
    if (next == copies.end()) {
      next = copies.begin();
      return;
    }
    next = next->second->expired() ? copies.erase(next) : std::next(next);
  }

  void sweep() {
    for (auto it = copies.begin(); it != copies.end();) {
      it = it->second->expired() ? copies.erase(it) : std::next(it);
    }
    next = copies.end();
  }

  PackedWeights* find(const mx::array& w, const mx::array& scales, const mx::array& biases, const QmmArgs& a, bool create) {
    const std::lock_guard<std::mutex> lock(mutex);
    check_one();
    const Key key{a.w, scales.data<void>(), biases.data<void>(), a.N, a.K, a.group_size, a.bits};
    auto [it, end] = copies.equal_range(key);
    for (; it != end; ++it) {
      const Copy& c = *it->second;
      if (same_owner(c.w, w.data_shared_ptr()) && same_owner(c.scales, scales.data_shared_ptr()) &&
          same_owner(c.biases, biases.data_shared_ptr())) {
        return &it->second->packed;
      }
    }
    if (!create) {
      return nullptr;
    }
    auto copy = std::make_unique<Copy>();
    copy->w = w.data_shared_ptr();
    copy->scales = scales.data_shared_ptr();
    copy->biases = biases.data_shared_ptr();
    return &copies.emplace(key, std::move(copy))->second->packed;
  }
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
    filled_bytes += copy_bytes(p);
  });
}

PackedWeights* packed_copy(const mx::array& w, const mx::array& scales, const mx::array& biases, const QmmArgs& a) {
  return Cache::instance().find(w, scales, biases, a, packed_mode() == PackedMode::on);
}

void register_packed(const mx::array& w, const mx::array& scales, const mx::array& biases, int group_size, int bits) {
  require(w.is_available() && scales.is_available() && biases.is_available(), "register evaluated weights");
  check_weights(w, scales, biases, static_cast<int64_t>(w.shape(1)) * 32 / bits, group_size, bits);
  QmmArgs a = weight_args(w, scales, biases, 0, group_size, bits);
  Cache::instance().find(w, scales, biases, a, true);
}

PackedCount packed_count() {
  Cache& cache = Cache::instance();
  const std::lock_guard<std::mutex> lock(cache.mutex);
  cache.sweep();
  return {static_cast<int64_t>(cache.copies.size()), filled_bytes.load()};
}

} // namespace vmlx
