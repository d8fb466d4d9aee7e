#!/usr/bin/env bash
# The Python module (docs/embedding.md, "Python"): `pip install .` of this checkout into a
# fresh virtual environment, then its pytest suite from outside the source tree (the GPU
# tests skip, saying why, on a machine without one). CI runs it after the tests.
#
#   tools/python_check.sh [BUILD_DIR]
#
# With a BUILD_DIR that tools/bootstrap.sh configured, pip's build (scikit-build-core) reuses
# it, so only the extension is compiled; without one, pip builds what the module links from
# scratch. nanobind, scikit-build-core, numpy and pytest come from PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-}
if [[ -n $build ]]; then
  # Kept after the run: the build tree's CMake cache names this interpreter. Outside the
  # build and source trees (CMake refuses include paths inside them for nanobind's target).
  venv="${TMPDIR:-/tmp}/tileplan-python-$(realpath "$build" | md5sum | cut -c1-12)"
  rm -rf "$venv"
else
  venv=$(mktemp -d /tmp/tileplan-python.XXXXXX)
  trap 'rm -rf "$venv"' EXIT
fi
/usr/bin/python3 -m venv "$venv"
if ! "$venv/bin/pip" install -q --disable-pip-version-check nanobind scikit-build-core numpy \
    pytest; then
  # Only an unreachable package index excuses this step, and it says so.
  if ! "$venv/bin/python" -c 'import urllib.request as u; u.urlopen("https://pypi.org/simple/nanobind/", timeout=20)' \
      2> /dev/null; then
    echo "python_check: SKIPPED: PyPI is unreachable from this machine, so nanobind and" \
      "scikit-build-core cannot be installed"
    exit 0
  fi
  exit 1
fi
pip_args=(--no-build-isolation --disable-pip-version-check -q)
if [[ -n $build ]]; then
  pip_args+=(--config-settings "build-dir=$build")
fi
"$venv/bin/pip" install "${pip_args[@]}" .
cd "$venv"
"$venv/bin/python" -c 'import tileplan; print("python_check: tileplan", tileplan.__version__, "from", tileplan.__file__)'
CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES-}" "$venv/bin/python" -m pytest -q -rs \
  "$OLDPWD/python/tests"
