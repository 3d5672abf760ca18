#!/usr/bin/env bash
# The main job on the embedded default: set up, start (or join) a local Ray, ingest the Python reference topics
# through the IngestService, build the index and answer a question with sources.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/ragline demo "$@"
