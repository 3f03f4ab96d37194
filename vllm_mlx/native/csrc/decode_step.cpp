#include "decode_step.h"

#include <atomic>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "fused_kernels.h"
#include "kernels.h"
#include "mlx/backend/cpu/encoder.h"
#include "primitives.h"
#include "strided.h"

namespace vmlx {

namespace {

// offsets of the arrays inside one layer's kLayerWeights
constexpr int kInNorm = 0, kQ = 1, kK = 4, kV = 7, kO = 10, kPostNorm = 13, kGate = 14, kUp = 17, kDown = 20;
// inputs: h, positions, key_start, inv_freq, then the caches (the weights: DecodeWeights)
constexpr int kFixed = 4;

std::atomic<int64_t> write_copies{0};

void check_projection(const mx::array* w, int at, int K, int N, int group_size, int bits) {
  check_weights(w[at], w[at + 1], w[at + 2], K, group_size, bits);
  require(w[at].shape(0) == N, "a projection has the wrong output width");
}

void check_layer(const std::vector<mx::array>& w, int base, int D, const DecodeParams& p, int head_dim, int hidden) {
  const mx::array* layer = w.data() + base;
  for (int norm : {kInNorm, kPostNorm}) {
    require(layer[norm].dtype() == mx::float32 && layer[norm].ndim() == 1 && layer[norm].shape(0) == D, "norm weights must be float32 [D]");
  }
  const int ag = p.attention_group_size, ab = p.attention_bits;
  check_projection(layer, kQ, D, p.n_heads * head_dim, ag, ab);
  check_projection(layer, kK, D, p.n_kv_heads * head_dim, ag, ab);
  check_projection(layer, kV, D, p.n_kv_heads * head_dim, ag, ab);
  check_projection(layer, kO, p.n_heads * head_dim, D, ag, ab);
  check_projection(layer, kGate, D, hidden, p.mlp_group_size, p.mlp_bits);
  check_projection(layer, kUp, D, hidden, p.mlp_group_size, p.mlp_bits);
  check_projection(layer, kDown, hidden, D, p.mlp_group_size, p.mlp_bits);
}

// The per-step scratch rows of one sequence batch (thread_local on MLX's CPU stream).
struct Scratch {
  std::vector<float> normed, q, k, k_rot, v, q_rot, attn, proj, gate, up;
  void size(int64_t B, int64_t D, int64_t q_width, int64_t kv_width, int64_t hidden) {
    normed.resize(B * D);
    q.resize(B * q_width);
    k.resize(B * kv_width);
    k_rot.resize(B * kv_width); // float16 caches: the rows before rounding
    v.resize(B * kv_width);
    q_rot.resize(B * q_width);
    attn.resize(B * q_width);
    proj.resize(B * D);
    gate.resize(B * hidden);
    up.resize(B * hidden);
  }
};

struct Layer {
  const float* in_norm;
  const float* post_norm;
  QmmArgs q, k, v, o, gate, up, down;
  // float32 caches: k_cache, v_cache [B, Hkv, capacity, Dh] (rows < write_index) and
  // this token's rows k_new, v_new [B, Hkv, Dh]; float16 caches: the *_f16 ones (half bits)
  const float* k_cache = nullptr;
  const float* v_cache = nullptr;
  float* k_new = nullptr;
  float* v_new = nullptr;
  const uint16_t* k_cache_f16 = nullptr;
  const uint16_t* v_cache_f16 = nullptr;
  uint16_t* k_new_f16 = nullptr;
  uint16_t* v_new_f16 = nullptr;
};

struct Step {
  DecodeParams p;
  int64_t B, D, head_dim, hidden, capacity;
  const int32_t* positions;
  const int32_t* key_start;
  const float* inv_freq;
  float* h; // the output rows, updated layer by layer
};

RopeArgs rope_rows(const Step& s, const float* x, float* y, int64_t heads) {
  RopeArgs r = rope_heads(x, y, s.B, heads, 1, s.head_dim);
  r.inv_freq = s.inv_freq;
  r.dims = s.p.rope_dims;
  r.traditional = s.p.traditional;
  r.scale = s.p.rope_scale;
  r.offsets = s.positions;
  return r;
}

void to_halves(const float* x, uint16_t* y, int64_t n) {
#if defined(VMLX_HAVE_AVX2)
  if (avx2_enabled()) {
    avx2::to_halves(x, y, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i) {
    y[i] = float_to_half(x[i]);
  }
}

void add_rows(float* h, const float* r, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    h[i] += r[i];
  }
}

void run_layer(const Step& s, Layer& L, Scratch& t) {
  const int64_t B = s.B, D = s.D, Dh = s.head_dim;
  const int64_t Hkv = s.p.n_kv_heads;
  const bool half = L.k_cache_f16 != nullptr;
  // attention half: norm, q/k/v in one fork-join, RoPE, this token's cache row
  rms_norm(s.h, L.in_norm, t.normed.data(), B, D, s.p.eps);
  L.q.x = L.k.x = L.v.x = t.normed.data();
  L.q.y = t.q.data();
  L.k.y = t.k.data();
  L.v.y = half ? t.v.data() : L.v_new; // [B, 1, Hkv*Dh] rows are [B, Hkv, Dh]
  const QmmArgs qkv[3] = {L.q, L.k, L.v};
  qmm_many(qkv, 3);
  rope(rope_rows(s, t.q.data(), t.q_rot.data(), s.p.n_heads));
  rope(rope_rows(s, t.k.data(), half ? t.k_rot.data() : L.k_new, Hkv));
  SdpaArgs a{};
  a.q = t.q_rot.data();
  if (half) { // the new rows rounded as the cache will hold them, and read so now too
    to_halves(t.k_rot.data(), L.k_new_f16, B * Hkv * Dh);
    to_halves(t.v.data(), L.v_new_f16, B * Hkv * Dh);
    a.k_f16 = L.k_cache_f16;
    a.v_f16 = L.v_cache_f16;
    a.k_last_f16 = L.k_new_f16;
    a.v_last_f16 = L.v_new_f16;
  } else {
    a.k = L.k_cache;
    a.v = L.v_cache;
    a.k_last = L.k_new;
    a.v_last = L.v_new;
  }
  a.out = t.attn.data();
  a.B = B;
  a.Hq = s.p.n_heads;
  a.Hkv = Hkv;
  a.Lq = 1;
  a.Lk = s.p.write_index + 1;
  a.D = Dh;
  const int64_t q_strides[4] = {s.p.n_heads * Dh, Dh, Dh, 1};
  const int64_t kv_strides[4] = {Hkv * s.capacity * Dh, s.capacity * Dh, Dh, 1};
  for (int i = 0; i < 4; ++i) {
    a.q_strides[i] = q_strides[i];
    a.k_strides[i] = a.v_strides[i] = kv_strides[i];
  }
  a.scale = s.p.scale;
  a.causal = false; // one query row sees every key up to its own
  a.key_start = s.key_start;
  sdpa(a);
  L.o.x = t.attn.data();
  L.o.y = t.proj.data();
  qmm(L.o);
  add_rows(s.h, t.proj.data(), B * D);
  // MLP half: norm, gate/up in one fork-join, SwiGLU, down, residual
  rms_norm(s.h, L.post_norm, t.normed.data(), B, D, s.p.eps);
  L.gate.x = L.up.x = t.normed.data();
  L.gate.y = t.gate.data();
  L.up.y = t.up.data();
  const QmmArgs gate_up[2] = {L.gate, L.up};
  qmm_many(gate_up, 2);
  silu_mul(t.gate.data(), t.up.data(), t.gate.data(), B * s.hidden);
  L.down.x = t.gate.data();
  L.down.y = t.proj.data();
  qmm(L.down);
  add_rows(s.h, t.proj.data(), B * D);
}

} // namespace

int64_t kv_write_copies() {
  return write_copies.load();
}

DecodeWeights decode_weights(const std::vector<mx::array>& weights, const DecodeParams& p) {
  require(!weights.empty() && weights.size() % kLayerWeights == 0, "weights must be 23 arrays per layer");
  const int layers = static_cast<int>(weights.size() / kLayerWeights);
  require(p.n_heads > 0 && p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0, "n_heads must be a multiple of n_kv_heads");
  require(weights[kInNorm].ndim() == 1, "norm weights must be float32 [D]");
  require(weights[kQ].ndim() == 2 && weights[kQ].shape(0) % p.n_heads == 0, "q rows must split into n_heads");
  require(weights[kGate].ndim() == 2, "gate weights must be a matrix");
  const int D = weights[kInNorm].shape(0);
  const int head_dim = weights[kQ].shape(0) / p.n_heads;
  const int hidden = weights[kGate].shape(0);
  for (int l = 0; l < layers; ++l) {
    check_layer(weights, l * kLayerWeights, D, p, head_dim, hidden);
  }
  auto stream = cpu_stream();
  auto held = std::make_shared<std::vector<mx::array>>();
  for (const auto& w : weights) {
    held->push_back(as_contiguous(w, stream));
  }
  mx::eval(*held); // read by the node directly, never through MLX's graph
  return {held, layers, D, head_dim, hidden, p};
}

std::vector<mx::array> decode_layers(
    const mx::array& h,
    const DecodeWeights& weights,
    const std::vector<mx::array>& caches,
    const mx::array& positions,
    const mx::array& key_start,
    const mx::array& inv_freq,
    const DecodeParams& p) {
  require(h.dtype() == mx::float32 && h.ndim() == 3 && h.shape(1) == 1, "h must be float32 [B, 1, D]");
  const int layers = weights.layers;
  require(static_cast<int>(caches.size()) == 2 * layers, "caches must be a key and a value array per layer");
  const int B = h.shape(0);
  require(h.shape(2) == weights.D, "h must be [B, 1, D] for the weights' D");
  const DecodeParams& c = weights.checked;
  require(p.attention_group_size == c.attention_group_size && p.attention_bits == c.attention_bits &&
              p.mlp_group_size == c.mlp_group_size && p.mlp_bits == c.mlp_bits && p.n_heads == c.n_heads &&
              p.n_kv_heads == c.n_kv_heads,
          "the weights were checked for other group sizes, bits or heads");
  const int head_dim = weights.head_dim;
  require(p.rope_dims > 0 && p.rope_dims % 2 == 0 && p.rope_dims <= head_dim, "rope dims must be even and <= head_dim");
  require(inv_freq.dtype() == mx::float32 && inv_freq.ndim() == 1 && inv_freq.shape(0) == p.rope_dims / 2, "inv_freq must be float32 [dims / 2]");
  for (const auto* a : {&positions, &key_start}) {
    require(a->dtype() == mx::int32 && a->ndim() == 1 && a->shape(0) == B, "positions and key_start must be int32 [B]");
  }
  const mx::Shape cache_shape = caches[0].shape();
  require(cache_shape.size() == 4 && cache_shape[0] == B && cache_shape[1] == p.n_kv_heads && cache_shape[3] == head_dim,
          "caches must be [B, n_kv_heads, capacity, head_dim]");
  require(p.write_index >= 0 && p.write_index < cache_shape[2], "write_index must be inside the caches' capacity");
  const mx::Dtype cache_dtype = caches[0].dtype();
  require(cache_dtype == mx::float32 || cache_dtype == mx::float16, "the caches must be float32 or float16");
  for (const auto& c : caches) {
    require(c.dtype() == cache_dtype && c.shape() == cache_shape, "every cache must have one dtype and shape");
  }
  auto stream = cpu_stream();
  std::vector<mx::array> inputs{h, as_contiguous(positions, stream), as_contiguous(key_start, stream), as_contiguous(inv_freq, stream)};
  inputs.insert(inputs.end(), caches.begin(), caches.end());
  std::vector<mx::Shape> shapes{h.shape(), {layers, 2, B, p.n_kv_heads, head_dim}};
  return mx::array::make_arrays(
      std::move(shapes), {mx::float32, cache_dtype}, std::make_shared<DecodeLayers>(stream, p, weights), std::move(inputs));
}

void DecodeLayers::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& encoder = mx::cpu::get_command_encoder(stream());
  const mx::array h = packed_input(inputs[0], encoder);
  const int layers = w_.layers;
  const std::vector<mx::array>& weights = *w_.arrays;
  std::vector<mx::array> caches;
  for (int i = 0; i < 2 * layers; ++i) { // views (a trimmed cache) packed first
    caches.push_back(packed_input(inputs[kFixed + i], encoder));
  }
  for (auto& out : outputs) {
    out.set_data(mx::allocator::malloc(out.nbytes()));
  }
  Step s{};
  s.p = p_;
  s.B = h.shape(0);
  s.D = h.shape(2);
  s.hidden = w_.hidden;
  s.head_dim = w_.head_dim;
  s.capacity = caches[0].shape(2);
  s.positions = inputs[1].data<int32_t>();
  s.key_start = inputs[2].data<int32_t>();
  s.inv_freq = inputs[3].data<float>();
  s.h = outputs[0].data<float>();
  const int64_t rows = s.B * p_.n_kv_heads * s.head_dim;
  const bool half = outputs[1].dtype() == mx::float16; // the caches' dtype
  std::vector<Layer> stack(layers);
  for (int l = 0; l < layers; ++l) {
    const int base = l * kLayerWeights;
    auto proj = [&](int at, int group_size, int bits) {
      return weight_args(weights[base + at], weights[base + at + 1], weights[base + at + 2], s.B, group_size, bits);
    };
    Layer& L = stack[l];
    L.in_norm = weights[base + kInNorm].data<float>();
    L.post_norm = weights[base + kPostNorm].data<float>();
    L.q = proj(kQ, p_.attention_group_size, p_.attention_bits);
    L.k = proj(kK, p_.attention_group_size, p_.attention_bits);
    L.v = proj(kV, p_.attention_group_size, p_.attention_bits);
    L.o = proj(kO, p_.attention_group_size, p_.attention_bits);
    L.gate = proj(kGate, p_.mlp_group_size, p_.mlp_bits);
    L.up = proj(kUp, p_.mlp_group_size, p_.mlp_bits);
    L.down = proj(kDown, p_.mlp_group_size, p_.mlp_bits);
    if (half) {
      L.k_cache_f16 = caches[2 * l].data<uint16_t>();
      L.v_cache_f16 = caches[2 * l + 1].data<uint16_t>();
      L.k_new_f16 = outputs[1].data<uint16_t>() + (2 * l) * rows;
      L.v_new_f16 = outputs[1].data<uint16_t>() + (2 * l + 1) * rows;
    } else {
      L.k_cache = caches[2 * l].data<float>();
      L.v_cache = caches[2 * l + 1].data<float>();
      L.k_new = outputs[1].data<float>() + (2 * l) * rows;
      L.v_new = outputs[1].data<float>() + (2 * l + 1) * rows;
    }
  }
  // the weights' owner rides along: the node's arrays outlive its evaluation
  encoder.dispatch([s, stack = std::move(stack), x = h.data<float>(), held = w_.arrays]() mutable {
    std::memcpy(s.h, x, s.B * s.D * sizeof(float));
    thread_local Scratch scratch;
    scratch.size(s.B, s.D, s.p.n_heads * s.head_dim, s.p.n_kv_heads * s.head_dim, s.hidden);
    for (Layer& L : stack) {
      run_layer(s, L, scratch);
    }
  });
}

void DecodeLayers::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  cpu_only();
}

bool DecodeLayers::is_equivalent(const mx::Primitive&) const {
  return false; // every step writes its own cache row: never merged by MLX's graph simplification
}

std::vector<mx::Shape> DecodeLayers::output_shapes(const std::vector<mx::array>& inputs) {
  const auto& cache = inputs.back();
  return {inputs[0].shape(), {w_.layers, 2, cache.shape(0), cache.shape(1), cache.shape(3)}};
}

namespace {

// Queue the write of rows src [heads, D] into row `index` of out [heads, capacity, D]
// (T: float or uint16_t half bits; R: T, or float rounded to half), after copying
// `source` into out when it was not donated.
template <typename T, typename R>
void dispatch_write(
    mx::cpu::CommandEncoder& encoder,
    const std::optional<mx::array>& source,
    mx::array& out,
    const R* src,
    int64_t heads,
    int64_t capacity,
    int64_t D,
    int index) {
  encoder.dispatch([source, dst = out.data<T>(), src, heads, capacity, D, index]() {
    if (source) {
      const auto& c = *source;
      if (c.flags().row_contiguous) {
        std::memcpy(dst, c.data<T>(), c.nbytes());
      } else {
        gather_strided(c.data<T>(), {c.shape().begin(), c.shape().end()}, {c.strides().begin(), c.strides().end()}, dst);
      }
    }
    for (int64_t bh = 0; bh < heads; ++bh) {
      T* row = dst + (bh * capacity + index) * D;
      if constexpr (std::is_same_v<T, R>) {
        std::memcpy(row, src + bh * D, D * sizeof(T));
      } else {
        to_halves(src + bh * D, row, D);
      }
    }
  });
}

} // namespace

mx::array kv_write(const mx::array& cache, const mx::array& rows, int layer, int which, int index) {
  require((cache.dtype() == mx::float32 || cache.dtype() == mx::float16) && cache.ndim() == 4,
          "cache must be float32 or float16 [B, Hkv, capacity, head_dim]");
  require((rows.dtype() == cache.dtype() || rows.dtype() == mx::float32) && rows.ndim() == 5,
          "rows must be [layers, 2, B, Hkv, head_dim] of the cache's dtype or float32");
  require(rows.shape(2) == cache.shape(0) && rows.shape(3) == cache.shape(1) && rows.shape(4) == cache.shape(3),
          "rows must match the cache's batch, heads and head size");
  require(layer >= 0 && layer < rows.shape(0) && (which == 0 || which == 1), "layer or which is out of range");
  require(index >= 0 && index < cache.shape(2), "index must be inside the cache's capacity");
  auto stream = cpu_stream();
  return mx::array(cache.shape(), cache.dtype(), std::make_shared<KvWrite>(stream, layer, which, index), {cache, rows});
}

void KvWrite::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  auto& encoder = mx::cpu::get_command_encoder(stream());
  const auto& cache = inputs[0];
  const mx::array rows = packed_input(inputs[1], encoder);
  auto& out = outputs[0];
  const bool in_place = cache.is_donatable() && cache.flags().row_contiguous && cache.data_size() == cache.size();
  std::optional<mx::array> source;
  if (in_place) {
    out.copy_shared_buffer(cache);
  } else {
    out.set_data(mx::allocator::malloc(out.nbytes()));
    source = cache;
    write_copies.fetch_add(1);
  }
  const int64_t B = cache.shape(0), H = cache.shape(1), capacity = cache.shape(2), D = cache.shape(3);
  const int64_t first = ((layer_ * 2 + which_) * B * H) * D;
  if (cache.dtype() == mx::float32) {
    dispatch_write<float, float>(encoder, source, out, rows.data<float>() + first, B * H, capacity, D, index_);
  } else if (rows.dtype() == mx::float16) {
    dispatch_write<uint16_t, uint16_t>(encoder, source, out, rows.data<uint16_t>() + first, B * H, capacity, D, index_);
  } else { // float32 rows into a float16 cache: rounded as MLX's astype(float16)
    dispatch_write<uint16_t, float>(encoder, source, out, rows.data<float>() + first, B * H, capacity, D, index_);
  }
}

void KvWrite::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) {
  cpu_only();
}

bool KvWrite::is_equivalent(const mx::Primitive& other) const {
  const auto& o = static_cast<const KvWrite&>(other);
  return layer_ == o.layer_ && which_ == o.which_ && index_ == o.index_;
}

std::vector<mx::Shape> KvWrite::output_shapes(const std::vector<mx::array>& inputs) {
  return {inputs[0].shape()};
}

} // namespace vmlx
