#!/usr/bin/env bash
# Create .venv in the repository root (if missing) and install nac-drive into it, with the
# test tools. Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
# torch is installed first and pinned: this CPU build is enough for everything here, while an
# unpinned torch may pull several GB of CUDA packages. Override with TORCH_SPEC=... for a GPU.
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}

if [ ! -x .venv/bin/python ]; then
    echo "creating .venv with $($PYTHON --version)"
    "$PYTHON" -m venv .venv
fi
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
    echo "installing $TORCH_SPEC"
    "${PIP[@]}" install "$TORCH_SPEC"
fi
if ! .venv/bin/python -c "import nac, scripts.cli, pytest" 2>/dev/null || [ pyproject.toml -nt .venv/.installed ]; then
    echo "installing nac-drive and its dependencies"
    "${PIP[@]}" install -e ".[test]"
    touch .venv/.installed
fi
