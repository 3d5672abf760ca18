#!/usr/bin/env bash
# Lint, types, then pytest: with no arguments every tier that can run here (unit, e2e, integration, browser; gpu
# skips without CUDA), never `quality`. Arguments go to pytest: `scripts/test.sh -m unit` is the quick loop (no Ray).
# Ends with the 25 slowest tests, so every CI log shows where the time goes.
set -euo pipefail
cd "$(dirname "$0")/.."
# The browser tier drives Debian's Chromium: Playwright cannot download a browser of its own here.
RAGLINE_DEBIAN_PACKAGES=chromium scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/mypy
exec .venv/bin/pytest --durations=25 "$@"
