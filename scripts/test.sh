#!/usr/bin/env bash
# Run the test suite, with OpenBLAS preloaded where it exists (the servers the tests start
# preload it themselves; this speeds up the models that tests load in-process).
set -euo pipefail
cd "$(dirname "$0")/.."
lib="/usr/lib/$(uname -m)-linux-gnu/openblas-pthread/libopenblas.so.0"
if [[ "$(uname -s)" == "Linux" && -e "$lib" ]]; then
  export LD_PRELOAD="$lib${LD_PRELOAD:+:$LD_PRELOAD}"
fi
exec python -m pytest -q "$@"
