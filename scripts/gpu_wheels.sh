#!/usr/bin/env bash
# Our runtime dependencies that the GPU machine's image lacks, as CPython 3.12 x86-64 wheels in .whl/ (ignored by
# git, carried with the device call). The image has torch (CUDA), numpy, psutil, anyio, nvidia-ml-py already.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
for wheel in pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.7.0 typing-inspection==0.4.2 \
             msgspec==0.23.0 google-re2==1.1.20251105; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${platforms[@]}" -d .whl "$wheel"
done
ls .whl
