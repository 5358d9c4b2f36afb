#!/usr/bin/env bash
# Ferry vs PyTorch on this machine: the same training iteration (ResNet-50 batch 8 at 224, GPT-2
# small batch 4 at seq 256), interleaved runs, one table per case with Ferry/PyTorch of the median
# iteration time. See bench/README.md.
#
# Usage: bench/vs_pytorch.sh [options of bench/pytorch_vs_ferry.py]   (e.g. --cases resnet50 --rounds 5)
# Environment: FERRY=/path/to/ferry skips the build and uses that binary.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# PyTorch: Debian's python3-torch (1.13, CPU). libopenblas0-pthread makes Debian's libblas.so.3
# alternative OpenBLAS instead of the reference BLAS, which PyTorch's Linear layers call.
"$root/scripts/install-deps.sh"  # the one installer; it lists these packages

if [[ -n ${FERRY:-} ]]; then
  ferry=$FERRY
else
  build_dir=$("$root/scripts/build.sh")
  ferry=$build_dir/ferry
fi

exec /usr/bin/python3 "$root/bench/pytorch_vs_ferry.py" --ferry "$ferry" "$@"
