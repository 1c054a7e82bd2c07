#!/usr/bin/env bash
# Builds pytorch-fast-transformers 0.4.0 into the given virtual environment.
# It has no wheel and its setup.py compiles CUDA kernels whenever `nvcc` runs, which fails
# against a CPU-only torch; so nvcc is hidden from PATH unless the installed torch has CUDA.
set -euo pipefail
venv=${1:-.venv}
py="$venv/bin/python"
if "$py" -c "import fast_transformers.causal_product" 2>/dev/null; then
    exit 0
fi
if ! "$py" -c "import torch, sys; sys.exit(0 if torch.version.cuda else 1)"; then
    clean_path=""
    IFS=: read -ra dirs <<<"$PATH"
    for d in "${dirs[@]}"; do
        [ -x "$d/nvcc" ] && continue
        clean_path="${clean_path:+$clean_path:}$d"
    done
    export PATH="$clean_path"
    unset CUDA_HOME CUDA_PATH || true
fi
echo "building pytorch-fast-transformers (a few minutes the first time, cached afterwards)"
"$py" -m pip install --no-build-isolation "pytorch-fast-transformers==0.4.0"
