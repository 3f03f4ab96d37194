// AMX-BF16 products of the bf16 attention body (attention_bf16.cpp prepares the bf16
// queries, keys, weights and values; kernels.h: amx): tiles of 16 query rows, each
// TDPBF16PS 16 x 16 x 32 multiply-adds summed in float32 (8,192 an instruction, 16x
// vdpbf16ps). Compiled with -mamx-tile -mamx-bf16 (x86-64 only), called only when the
// kernel granted this process the tile state (supported()).
//
// An output element is one row's and one key's (or dimension's) chain over 16-pair tiles
// in a fixed order from its block's first key; the other 15 rows of a tile (padding or
// neighbours) never enter it, and a row's pairs past its own last key carry weight 0
// (exact). A row's bits therefore do not depend on its batch or the rows tiled with it.
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <csetjmp>
#include <csignal>
#include <cstdint>

#include "kernels.h"

namespace vmlx::amx {

namespace {

constexpr long ARCH_REQ_XCOMP_PERM = 0x1023;
constexpr long XFEATURE_XTILEDATA = 18;

// palette 1, every tile 16 rows of 64 bytes (16 floats, or 16 bf16 pairs)
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
  TileConfig() {
    for (int t = 0; t < 8; ++t) {
      colsb[t] = 64;
      rows[t] = 16;
    }
  }
};

void configure() {
  static const TileConfig config;
  _tile_loadconfig(&config);
}

// Each call configures the tiles and releases them when done: a pool thread then holds no
// tile state while it waits (the kernel saves 8 KB more per switch of a thread that does).
struct Tiles {
  Tiles() {
    configure();
  }
  ~Tiles() {
    _tile_release();
  }
};

// tile C = dots of 16 query rows (tiles 4-7) with one group of 16 keys at kt over 16 KT
// pairs, B its key tiles' register: a macro, as the intrinsics take literal tile numbers
// (two groups in flight use C 0, B 1 and C 3, B 2)
#define VMLX_GROUP_DOTS(KT, C, B, kt)          \
  do {                                         \
    _tile_zero(C);                             \
    _tile_loadd(B, (kt), 64);                  \
    _tile_dpbf16ps(C, 4, B);                   \
    _tile_loadd(B, (kt) + 16 * 16, 64);        \
    _tile_dpbf16ps(C, 5, B);                   \
    if constexpr ((KT) == 4) {                 \
      _tile_loadd(B, (kt) + 32 * 16, 64);      \
      _tile_dpbf16ps(C, 6, B);                 \
      _tile_loadd(B, (kt) + 48 * 16, 64);      \
      _tile_dpbf16ps(C, 7, B);                 \
    }                                          \
  } while (false)

template <int KT>
void scores_as(const uint32_t* q, const uint32_t* keys, int64_t groups, float* out, int64_t stride) {
  constexpr int64_t P = 16 * KT;
  const Tiles tiles;
  _tile_loadd(4, q, P * 4);
  _tile_loadd(5, q + 16, P * 4);
  if constexpr (KT == 4) {
    _tile_loadd(6, q + 32, P * 4);
    _tile_loadd(7, q + 48, P * 4);
  }
  int64_t g = 0;
  for (; g + 2 <= groups; g += 2) {
    VMLX_GROUP_DOTS(KT, 0, 1, keys + g * P * 16);
    VMLX_GROUP_DOTS(KT, 3, 2, keys + (g + 1) * P * 16);
    _tile_stored(0, out + g * 16, stride * 4);
    _tile_stored(3, out + (g + 1) * 16, stride * 4);
  }
  if (g < groups) {
    VMLX_GROUP_DOTS(KT, 0, 1, keys + g * P * 16);
    _tile_stored(0, out + g * 16, stride * 4);
  }
}

#undef VMLX_GROUP_DOTS

// acc[16][h : h + 64] = (tiles 0-3) sums over `chunks` 16-pair chunks of weights and value pairs at h
inline void weighted_64(const uint32_t* w, int64_t w_stride, const uint32_t* values, int64_t D, int64_t h, int64_t chunks, float* acc) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t c = 0; c < chunks; ++c) {
    const uint32_t* v = values + 16 * c * D + h;
    _tile_loadd(4, w + 16 * c, w_stride * 4);
    _tile_loadd(5, v, D * 4);
    _tile_dpbf16ps(0, 4, 5);
    _tile_loadd(6, v + 16, D * 4);
    _tile_dpbf16ps(1, 4, 6);
    _tile_loadd(5, v + 32, D * 4);
    _tile_dpbf16ps(2, 4, 5);
    _tile_loadd(6, v + 48, D * 4);
    _tile_dpbf16ps(3, 4, 6);
  }
  _tile_stored(0, acc + h, D * 4);
  _tile_stored(1, acc + h + 16, D * 4);
  _tile_stored(2, acc + h + 32, D * 4);
  _tile_stored(3, acc + h + 48, D * 4);
}

sigjmp_buf probe_exit;

void on_probe_trap(int) {
  siglongjmp(probe_exit, 1);
}

// One tile product of known values with SIGILL caught: a hypervisor can report AMX and the
// kernel grant the tile state while the instructions still fault (or compute nothing), so
// the body is trusted only after it has run once here.
bool tiles_compute() {
  struct sigaction trap = {}, previous = {};
  trap.sa_handler = on_probe_trap;
  sigemptyset(&trap.sa_mask);
  sigaction(SIGILL, &trap, &previous);
  bool right = false;
  if (sigsetjmp(probe_exit, 1) == 0) {
    alignas(64) static uint16_t ones[16 * 32];
    alignas(64) float out[16 * 16] = {};
    std::fill(std::begin(ones), std::end(ones), uint16_t{0x3F80}); // bf16 1.0
    {
      const Tiles tiles;
      _tile_zero(0);
      _tile_loadd(1, ones, 64);
      _tile_loadd(2, ones, 64);
      _tile_dpbf16ps(0, 1, 2);
      _tile_stored(0, out, 64);
    }
    right = std::all_of(std::begin(out), std::end(out), [](float v) { return v == 32.0f; });
  }
  sigaction(SIGILL, &previous, nullptr);
  return right;
}

} // namespace

bool supported() {
  static const bool granted = [] {
    if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16")) {
      return false;
    }
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 && tiles_compute();
  }();
  return granted;
}

void scores(const uint32_t* q, int64_t P, const uint32_t* keys, int64_t groups, float* out, int64_t stride) {
  if (P == 32) {
    scores_as<2>(q, keys, groups, out, stride);
  } else {
    scores_as<4>(q, keys, groups, out, stride);
  }
}

void weighted(const uint32_t* w, int64_t w_stride, const uint32_t* values, int64_t D, int64_t chunks, float* acc) {
  const Tiles tiles;
  for (int64_t h = 0; h < D; h += 64) {
    weighted_64(w, w_stride, values, D, h, chunks, acc);
  }
}

} // namespace vmlx::amx
