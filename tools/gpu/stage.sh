#!/usr/bin/env bash
# Stages binaries built here for a run on the GPU machine (docs/gpu.md): copies the named
# executables from the build directory into a folder, strips them, and adds the shared
# libraries they need that the GPU machine lacks (Abseil, protobuf, SQLite, simdjson, GoogleTest
# from Debian). The CUDA libraries (libnvrtc, libcublasLt) are the GPU machine's own.
#
#   tools/gpu/stage.sh BUILD_DIR DEST_DIR BINARY...
set -euo pipefail
build=$1 dest=$2
shift 2
rm -rf "$dest"
mkdir -p "$dest/lib"
for name in "$@"; do
  src=$(find "$build" -type f -name "$name" -perm -u+x | head -n 1)
  [[ -n $src ]] || { echo "stage: no executable '$name' under $build" >&2; exit 1; }
  cp "$src" "$dest/$name"
  strip -s "$dest/$name"
  ldd "$src" | awk '/=> \// {print $3}' |
    grep -E '/lib(absl_|protobuf|sqlite3|simdjson|gtest|gmock)' |
    while read -r lib; do cp -u "$lib" "$dest/lib/"; done
done
strip -s "$dest"/lib/*.so* 2>/dev/null || true
du -sh "$dest"
