#!/usr/bin/env bash
# The tests marked mac_path in the configuration macOS runs: weights stay quantized on MLX's
# own kernels (VLLM_MLX_CPU_WEIGHTS=quantized, which `serve` reads too, so its servers do not
# re-execute with OpenBLAS), no native extension (VLLM_MLX_NATIVE=0), no OpenBLAS preloaded.
# Every process the tests start inherits this environment.
set -euo pipefail
cd "$(dirname "$0")/.."
unset LD_PRELOAD
export VLLM_MLX_NATIVE=0 VLLM_MLX_CPU_WEIGHTS=quantized
exec python -m pytest -q -m mac_path "$@"
