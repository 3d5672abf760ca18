#!/usr/bin/env bash
# Lint, then pytest with the type check beside it: with no arguments every tier that can run here (unit, e2e, integration, browser; gpu
# skips without CUDA), never `quality`. Arguments go to pytest: `scripts/test.sh -m unit` is the quick loop (no Ray).
# Ends with the 25 slowest tests, so every CI log shows where the time goes.
set -euo pipefail
cd "$(dirname "$0")/.."
# The browser tier drives Debian's Chromium: Playwright cannot download a browser of its own here.
RAGLINE_DEBIAN_PACKAGES=chromium scripts/setup.sh
.venv/bin/ruff check .
# mypy checks the types beside the tests, on the core pytest leaves it: 70 s of one core from a cold cache, which
# would otherwise come first
mkdir -p test-artifacts
rm -f test-artifacts/where-the-time-went.txt  # written by tests/conftest.py at the end of the run
.venv/bin/mypy > test-artifacts/mypy.log 2>&1 &
mypy_pid=$!
status=0
.venv/bin/pytest --durations=25 "$@" || status=$?
mypy_status=0
wait "$mypy_pid" || mypy_status=$?
cat test-artifacts/mypy.log
cat test-artifacts/where-the-time-went.txt 2>/dev/null || true
if [ "$mypy_status" != 0 ]; then
  exit "$mypy_status"
fi
exit "$status"
