// CPU kernels on raw pointers, independent of MLX: the primitives (primitives.cpp) call
// them from a dispatched CPU task.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <vector>

namespace vmlx {

// y[M, N] = x[M, K] @ dequantize(w, scales, biases)^T for MLX's affine layout: w is
// [N, K * bits / 32] uint32 with element j of a word in bits [j*bits, (j+1)*bits),
// scales and biases are [N, K / group_size] float32, w_real = q * scale + bias.
// scales_f16/biases_f16 (IEEE half bits, both or neither): used instead of scales and
// biases when set, 4 bytes per group instead of 8 (lossless for GGUF-derived weights).
struct PackedWeights;

struct QmmArgs {
  const float* x;
  const uint32_t* w;
  const float* scales;
  const float* biases;
  float* y;
  int64_t M, N, K;
  int group_size;
  int bits;
  const uint16_t* scales_f16 = nullptr;
  const uint16_t* biases_f16 = nullptr;
  // the same weights repacked for the AVX-512 int16 body (packed products), or nullptr
  PackedWeights* packed = nullptr;
};

// Weights [N, K] repacked in tiles of 16 rows (the last padded with zero rows) for the
// packed int16 body (qmm_packed_vnni.cpp): per tile, group and 32-weight chunk, 16 rows x
// 32 weights as 64-byte vectors whose dword lane i is row i. 4 bits: vector j's dword
// holds at bits 4s and 16 + 4s (s = 0..3) the weights 2p and 2p + 1, p = 4j + s;
// 8 bits: bytes 0 and 2 the weights 2p, 2p + 1 for p = 2j, bytes 1 and 3 for p = 2j + 1.
// scales and biases: [tiles, groups, 16] in a's type (float32, or float16 bits when
// a.scales_f16 is set: then scales_f16 and biases_f16, and scales, biases are nullptr).
// Filled by ensure_packed on the weights' first product: only a product's task may read
// its inputs (when the graph node is planned they may not be computed yet).
struct PackedWeights {
  const uint8_t* w = nullptr;
  const float* scales = nullptr;
  const float* biases = nullptr;
  const uint16_t* scales_f16 = nullptr;
  const uint16_t* biases_f16 = nullptr;
  std::once_flag filled;
  std::vector<uint8_t> bytes;
  std::vector<float> scale_values, bias_values;
  std::vector<uint16_t> scale_halves, bias_halves;
};
// a.packed filled from a's weights, once (packed_weights.cpp).
void ensure_packed(const QmmArgs& a);
// Which weights get packed copies (VLLM_MLX_NATIVE_PACKED, set_packed_mode): none
// ("0"), every product's ("1"), or only those registered (auto, the default: a model's
// weights when they fit the budget, vllm_mlx/native/packing.py).
enum class PackedMode { off, on, registered };
PackedMode packed_mode();
const char* packed_mode_name();
bool set_packed_mode(const char* name);
// Whether products look for packed copies: not off, the VNNI int16 body and int16
// activations.
bool packed_products();

// IEEE half bits -> float, portable (the generic bodies; the AVX2 ones use F16C).
inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  uint32_t bits;
  if (em >= 0x7c00u) { // inf / nan
    bits = sign | 0x7f800000u | ((em & 0x3ffu) << 13);
  } else if (em >= 0x0400u) { // normal: rebias the exponent by 127 - 15
    bits = sign | ((em << 13) + 0x38000000u);
  } else { // zero or subnormal: em * 2^-24, exact in float
    const float f = static_cast<float>(em) * 5.9604644775390625e-8f;
    bits = sign | std::bit_cast<uint32_t>(f);
  }
  return std::bit_cast<float>(bits);
}

// float -> IEEE half bits, rounded to nearest even (MLX's astype(float16)), portable:
// a decode step converts only its new key/value rows (a few hundred values a layer).
inline uint16_t float_to_half(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) { // nan: quiet, payload's top bits kept
    return sign | 0x7e00u | static_cast<uint16_t>((ax >> 13) & 0x3ffu);
  }
  if (ax >= 0x477ff000u) { // >= 65520 (or inf) rounds to inf
    return sign | 0x7c00u;
  }
  if (ax < 0x38800000u) { // below 2^-14: a subnormal half (units of 2^-24) or zero
    const float units = std::bit_cast<float>(ax) * 16777216.0f; // exact: a power of two
    return sign | static_cast<uint16_t>(std::nearbyint(units)); // the default mode: to even
  }
  uint32_t h = (ax - 0x38000000u) >> 13; // rebias the exponent by 127 - 15, keep 10 bits
  const uint32_t rest = ax & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) {
    ++h; // a carry into the exponent is still the right half
  }
  return sign | static_cast<uint16_t>(h);
}

inline float to_float(float x) {
  return x;
}

inline float to_float(uint16_t h) {
  return half_to_float(h);
}

// Decode-time attention for one query block: q [B, Hq, Lq, D], k/v [B, Hkv, Lk, D]
// given by element strides, out [B, Hq, Lq, D] contiguous. Query row i of Lq sees keys 0 .. Lk - Lq + i (causal) or all keys.
// K/V are float32 (k, v, k_last, v_last) or, when k_f16 is set, float16 (the *_f16
// pointers, IEEE half bits: a float16 KV cache, half the bytes a decode step reads).
struct SdpaArgs {
  const float* q;
  const float* k;
  const float* v;
  float* out;
  int64_t B, Hq, Hkv, Lq, Lk, D;
  int64_t q_strides[4];
  int64_t k_strides[4];
  int64_t v_strides[4];
  float scale;
  bool causal;
  // optional boolean mask (true: attend), read at [b, h, i, l] with these element
  // strides (0 where it broadcasts); nullptr: none
  const bool* mask;
  int64_t mask_strides[4];
  // optional first key per sequence [B] (a left-padded batch); nullptr: key 0
  const int32_t* key_start;
  // optional rows of the last key and value (l = Lk - 1) kept outside k/v: [B, Hkv, D]
  // contiguous (a decode step attends to its own new row before the cache holds it)
  const float* k_last;
  const float* v_last;
  const uint16_t* k_f16 = nullptr;
  const uint16_t* v_f16 = nullptr;
  const uint16_t* k_last_f16 = nullptr;
  const uint16_t* v_last_f16 = nullptr;
};

// K/V storage of element type T (float, or uint16_t half bits): which 0 keys, 1 values.
template <typename T>
struct SdpaKv;

template <>
struct SdpaKv<float> {
  static const float* cache(const SdpaArgs& a, int which) {
    return which == 0 ? a.k : a.v;
  }
  static const float* last(const SdpaArgs& a, int which) {
    return which == 0 ? a.k_last : a.v_last;
  }
};

template <>
struct SdpaKv<uint16_t> {
  static const uint16_t* cache(const SdpaArgs& a, int which) {
    return which == 0 ? a.k_f16 : a.v_f16;
  }
  static const uint16_t* last(const SdpaArgs& a, int which) {
    return which == 0 ? a.k_last_f16 : a.v_last_f16;
  }
};

template <typename T>
inline const T* sdpa_row(const SdpaArgs& a, int which, int64_t b, int64_t hkv, int64_t l) {
  const T* last = SdpaKv<T>::last(a, which);
  const int64_t* strides = which == 0 ? a.k_strides : a.v_strides;
  return last != nullptr && l == a.Lk - 1
      ? last + (b * a.Hkv + hkv) * a.D
      : SdpaKv<T>::cache(a, which) + b * strides[0] + hkv * strides[1] + l * strides[2];
}

template <typename T = float>
inline const T* sdpa_key(const SdpaArgs& a, int64_t b, int64_t hkv, int64_t l) {
  return sdpa_row<T>(a, 0, b, hkv, l);
}

template <typename T = float>
inline const T* sdpa_value(const SdpaArgs& a, int64_t b, int64_t hkv, int64_t l) {
  return sdpa_row<T>(a, 1, b, hkv, l);
}

// Whether query row i of head h may see key l (the mask and key_start; causal is a limit).
inline bool sdpa_allowed(const SdpaArgs& a, int64_t b, int64_t h, int64_t i, int64_t l) {
  if (a.key_start != nullptr && l < a.key_start[b]) {
    return false;
  }
  return a.mask == nullptr ||
      a.mask[b * a.mask_strides[0] + h * a.mask_strides[1] + i * a.mask_strides[2] + l * a.mask_strides[3]];
}

// How products read x: "int16" (the default) rounds each group of x to integers against
// its largest magnitude, x_k = sx_g * xq_k with sx_g = max|x_g| / L, L = 32767, and sums
// integer products exactly: |y - y_float| <= sum_g |scale_g| * sum_k q_k * sx_g / 2
// (relative ~2^-16 per group for int16), 1.1-1.6x the speed of "float", which is exact to
// float rounding like MLX. "int8" is the same with L = 127 (relative ~2^-8 per group: the
// numbers an int8-activation body would give; it runs the int16 body, so no faster; the
// accuracy study in docs/native-kernels.md). Each row's result is the same in any batch
// and any prompt block.
const char* activations();
bool set_activations(const char* name);
// Which body runs the int16 products under the AVX2 instruction set: "vnni" (AVX-512
// VNNI, the default where the CPU has it; VLLM_MLX_NATIVE_VNNI=0 keeps "avx2") or "avx2".
// Both give the same bits. False if the name is unknown or the CPU lacks it.
const char* int16_body();
bool set_int16_body(const char* name);

// Which body runs the attention (sdpa) at head sizes 64 and 128: "bf16" (AVX-512 BF16:
// queries, keys, softmax weights and values rounded to bfloat16, float32 sums and softmax;
// VLLM_MLX_NATIVE_ATTENTION=bf16 where the CPU has it; docs/native-kernels.md gives its
// accuracy), "amx" (the same roundings, the products on AMX tiles: other bits than
// "bf16"'s, the same bound; the default where the CPU and kernel grant AMX-BF16) or
// "float" (float32 arithmetic on the float16 or float32 cache; the default elsewhere,
// VLLM_MLX_NATIVE_ATTENTION=float keeps it). Decode steps and prompt blocks run the same
// body, so a row's bits do not depend on either. False if the name is unknown or the CPU
// lacks it.
const char* attention_body();
bool set_attention_body(const char* name);

void qmm(const QmmArgs& args);
// Several projections of one x (q/k/v, gate/up: same x, M, K, group size and bits) in
// one fork-join, x's group sums and permutation computed once.
void qmm_many(const QmmArgs* args, int count);
// y[N, K] = dequantize(w, scales, biases) (x and M unused): for prefill, where a BLAS
// sgemm on the float32 weights beats a matmul that unpacks them for every row block.
void dequantize_weights(const QmmArgs& args);
void sdpa(const SdpaArgs& args);

// Which instruction set the kernels dispatch to ("avx2" or "generic"): the best this
// CPU has, unless set_isa chose another (tests compare both). False if not available.
const char* isa();
bool set_isa(const char* name);
bool avx2_enabled(); // isa() == "avx2", without the string

// Kernel bodies per instruction set (kernels_*.cpp).
namespace generic {
void qmm_rows(const QmmArgs& a, const float* xsum, int64_t n0, int64_t n1);
void dequantize_rows(const QmmArgs& a, int64_t n0, int64_t n1);
// Query rows row0 .. row1 of kv head hkv's group * Lq (row = head in group * Lq + i)
// over keys l0 .. l1: part [row1 - row0, D + 2] holds each row's max, sum and weighted values.
void sdpa_task(const SdpaArgs& a, int64_t b, int64_t hkv, int64_t l0, int64_t l1, float* part, int64_t row0, int64_t row1);
} // namespace generic

namespace avx2 {
// x_perm: x with each 16-element half of a 32-element block reordered as its 8 even
// then 8 odd elements (4-bit only; nullptr for 8-bit), the order unpack32 yields.
void qmm_rows(
    const QmmArgs& a,
    const float* x_perm,
    const float* xsum,
    int64_t n0,
    int64_t n1);
void dequantize_rows(const QmmArgs& a, int64_t n0, int64_t n1);
// Query rows row0 .. row1 of kv head hkv's group * Lq (row = head in group * Lq + i)
// over keys l0 .. l1: part [row1 - row0, D + 2] holds each row's max, sum and weighted values.
void sdpa_task(const SdpaArgs& a, int64_t b, int64_t hkv, int64_t l0, int64_t l1, float* part, int64_t row0, int64_t row1);

// One row of x in int16 (qmm_int16_avx2.cpp): q [K] in each weight layout's element
// order, and per group its scale sx and float sum, each repeated INT16_ROWS times (the
// rows a kernel pass covers, whose groups are contiguous).
constexpr int INT16_ROWS = 4;
struct Int16X {
  int16_t* q;
  float* scale;
  float* sum;
};
// x's element order for each body: the AVX2 body's chunks (4 bits: perm4), the VNNI
// body's pairs of groups (their element pairs alternating) or the packed body's own.
enum class XOrder { chunks, pairs, natural };
// x rounded to |xq| <= levels per group (32767: int16; 127: int8's numbers), in `order`.
// False (and out unfinished) when x holds inf or nan: the float body takes those.
bool quantize_int16(const float* x, int64_t K, int group_size, int bits, int levels, XOrder order, Int16X& out);
// Weight rows [n0, n1) for `rows` rows of x (xs[m]'s output row at a.y + m * a.N),
// each output the one-row product's bits whatever `rows` is.
void qmm_rows_int16(const QmmArgs& a, const Int16X* xs, int64_t rows, int64_t n0, int64_t n1);
// y[i] = float_to_half(x[i]), 8 at a time by F16C (round to nearest even: the same bits,
// nan, inf and subnormal halves included)
void to_halves(const float* x, uint16_t* y, int64_t n);
} // namespace avx2

// The same int16 products on AVX-512 VNNI (qmm_int16_vnni.cpp): the AVX2 body's bits,
// x quantized with pairs. supported(): this CPU and build have it.
namespace vnni {
bool supported();
void qmm_rows_int16(const QmmArgs& a, const avx2::Int16X* xs, int64_t rows, int64_t n0, int64_t n1);
// On a.packed (x in XOrder::natural): each output one float chain over its groups.
void qmm_rows_packed(const QmmArgs& a, const avx2::Int16X* xs, int64_t rows, int64_t n0, int64_t n1);
} // namespace vnni

// The BF16 attention body (attention_bf16.cpp). supported(): this CPU and build have it;
// runs(a): it is selected and takes a's head size.
namespace bf16 {
bool supported();
bool runs(const SdpaArgs& a);
// prepared: the block of keys l0 .. l1 as prepare() leaves it (block_words(D, l1 - l0)
// words), or nullptr (the task converts what its rows read); the same bits either way.
void sdpa_task(const SdpaArgs& a, int64_t b, int64_t hkv, int64_t l0, int64_t l1, float* part, int64_t row0, int64_t row1, const uint32_t* prepared);
int64_t block_words(int64_t D, int64_t span);
void prepare(const SdpaArgs& a, int64_t b, int64_t hkv, int64_t l0, int64_t l1, uint32_t* out);
} // namespace bf16

// AMX-BF16 tiles of the bf16 body (attention_amx.cpp; the "amx" attention body).
// supported(): this CPU and build have it and the kernel granted the tile state.
// scores: out[r * stride + 16 g + n] = q row r . key n of group g (unscaled) for 16 query
// rows of P bf16 pairs (row stride P) and `groups` groups of keys laid out [group][pair][16].
// weighted: acc[16][D] = weights [16 rows][16 c pairs] (row stride w_stride) . values
// [pair][D] over `chunks` chunks of 16 pairs.
namespace amx {
bool supported();
void scores(const uint32_t* q, int64_t P, const uint32_t* keys, int64_t groups, float* out, int64_t stride);
void weighted(const uint32_t* w, int64_t w_stride, const uint32_t* values, int64_t D, int64_t chunks, float* acc);
} // namespace amx

} // namespace vmlx
