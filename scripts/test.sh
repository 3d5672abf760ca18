#!/usr/bin/env bash
# Everything that can run on this machine: lint, types, unit, integration and slow tests (gpu/e2e skip cleanly).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/mypy
exec .venv/bin/pytest "$@"
