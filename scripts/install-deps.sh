#!/usr/bin/env bash
# Installs Ferry's build and test dependencies from Debian's packages (skips what is present).
set -euo pipefail
# ocl-icd-opencl-dev is only a Recommends of libdnnl-dev, but Debian's dnnl-config.cmake (built with
# the OpenCL GPU runtime) calls find_package(OpenCL REQUIRED), so configuring fails without it.
# python3-numpy: bench/gpu_calibration.py's fit. python3-dev, pybind11-dev, python3-torch,
# python3-torchvision, python3-pytest: the PyTorch adapter (python/) and its tests;
# libopenblas0-pthread: PyTorch's Linear layers call libblas.so.3, which is otherwise the
# reference BLAS (12x slower on bench/torch_adapter.sh's transformer).
packages=(build-essential cmake g++ pkg-config libdnnl-dev ocl-icd-opencl-dev nlohmann-json3-dev libcli11-dev libfmt-dev
          googletest libgtest-dev libbenchmark-dev coinor-libcbc-dev libzstd-dev liblz4-dev liburing-dev python3-numpy
          python3-dev pybind11-dev python3-torch python3-torchvision python3-pytest
          libopenblas0-pthread)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
echo "ferry: installing ${missing[*]}" >&2
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
