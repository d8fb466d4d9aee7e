#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine (with the CUDA toolkit in /usr/local/cuda) and builds
# tileplan: installs the Debian packages the build needs when any is missing, configures
# with CMake + Ninja and builds everything.
#
#   TILEPLAN_BUILD_DIR     build directory (default: build)
#   TILEPLAN_CMAKE_ARGS    extra CMake arguments (e.g. -DTILEPLAN_SANITIZE=ON); naming clang
#                          installs clang and its sanitizer and fuzzer runtimes too
#   TILEPLAN_BUILD_TARGET  the target to build (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build g++ pkg-config libabsl-dev libprotobuf-dev protobuf-compiler
          libsqlite3-dev libgtest-dev libgmock-dev nlohmann-json3-dev libsimdjson-dev
          python3-protobuf python3-dev python3-venv)
if [[ ${TILEPLAN_CMAKE_ARGS:-} == *clang* ]]; then
  packages+=(clang libclang-rt-14-dev)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]}" >&2
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

build_dir=${TILEPLAN_BUILD_DIR:-build}
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" -G Ninja ${TILEPLAN_CMAKE_ARGS:-} >/dev/null
cmake --build "$build_dir" -j "$(nproc)" ${TILEPLAN_BUILD_TARGET:+--target "$TILEPLAN_BUILD_TARGET"}
