#!/usr/bin/env bash
# ferry.torch vs torch.utils.checkpoint and save_on_cpu vs plain PyTorch: step time and measured step
# peak of a torchvision ResNet-50 and a GPT-2-style transformer, each (case, method) in its own
# process, side by side in one run. See bench/README.md.
#
# Usage: bench/torch_adapter.sh [options of bench/torch_adapter.py]
#        (e.g. --cases gpt2 --out bench/results/torch-adapter-$(date +%F).md)
# Environment: FERRY_PYTHON=DIR uses the built `ferry` package in DIR and skips the build;
#              otherwise scripts/build.sh builds Ferry and DIR is <build>/python.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# Debian's PyTorch 1.13 (CPU) and torchvision; libopenblas0-pthread makes libblas.so.3 OpenBLAS
# instead of the reference BLAS that PyTorch's Linear layers would otherwise call (measured here: a
# 4-layer GPT-2 step with the 50,257-row head took 52 s on the reference BLAS, 4.4 s on OpenBLAS).
"$root/scripts/install-deps.sh"  # the one installer; it lists these packages

if [[ -z ${FERRY_PYTHON:-} ]]; then
  build_dir=$("$root/scripts/build.sh")
  FERRY_PYTHON=$build_dir/python
fi

# Passive OpenMP waiting: on this shared 2-core machine a spinning wait for a descheduled peer
# thread made PyTorch 1.4-3.5x slower under load (bench/README.md, vs_pytorch.sh).
export OMP_WAIT_POLICY=passive
exec /usr/bin/python3 "$root/bench/torch_adapter.py" --ferry-python "$FERRY_PYTHON" "$@"
