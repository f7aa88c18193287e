#!/usr/bin/env bash
# Download (here, where PyPI is reachable) the cp312 wheels the H200 image lacks, into .whl/ (git-ignored), so the
# device call can `carry` them: the device has no network. scripts/gpu_check.sh installs them with --no-index.
# Versions follow this venv's so both machines validate configs the same way.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
version() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))"; }
mkdir -p .whl
rm -f .whl/*.whl
for name in pydantic pydantic-core annotated-types typing-inspection typing-extensions; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "$name==$(version "$name")"
done
ls -la .whl
