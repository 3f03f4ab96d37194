#!/usr/bin/env bash
# Build the native CPU kernels (vllm_mlx/native/_kernels, an MLX extension) against the
# mlx package installed in this Python. Needs a C++20 compiler, CMake and nanobind; the
# server runs without them (MLX's own ops, float32 weights) when this step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${VLLM_MLX_NATIVE_BUILD_DIR:-build/native}"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
mkdir -p "$build"
log="$build/build.log"
if ! { cmake -S vllm_mlx/native/csrc -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DPython_EXECUTABLE="$(command -v python)" -DVLLM_MLX_NATIVE_OUT="$PWD/vllm_mlx/native" \
    && cmake --build "$build" -j"$(nproc 2>/dev/null || echo 2)"; } >"$log" 2>&1; then
  tail -n 30 "$log" >&2
  exit 1
fi
python -c "
import sys
from vllm_mlx import native
info = native.status()
sys.exit(0 if info['built'] else f'built, but does not import: {info[\"reason\"]}')"
