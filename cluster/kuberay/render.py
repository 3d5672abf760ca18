"""Writes deployments/serve_gpu.yaml into cluster/kuberay/rayservice.yaml as its serveConfigV2.

The RayService must serve exactly the graph `serve deploy deployments/serve_gpu.yaml` deploys, so that file is the
only one anyone edits; run this after changing it (tests/unit/test_cluster_configs.py fails until you do):

    python cluster/kuberay/render.py

Only the serveConfigV2 block is replaced, as text, so the rest of the manifest keeps its comments.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVE_CONFIG = ROOT / "deployments" / "serve_gpu.yaml"
RAYSERVICE = ROOT / "cluster" / "kuberay" / "rayservice.yaml"

# `  serveConfigV2: |` and every following line that is blank or indented deeper than the key.
BLOCK = re.compile(r"^(?P<indent>[ ]*)serveConfigV2: \|[^\n]*\n(?:(?:(?P=indent)[ ]+[^\n]*)?\n)*", re.MULTILINE)


def render(manifest: str, serve_config: str) -> str:
    """The manifest with its serveConfigV2 block replaced by `serve_config`, verbatim (comments included)."""
    match = BLOCK.search(manifest)
    if match is None:
        raise ValueError("no `serveConfigV2: |` block in the RayService manifest")
    indent = match["indent"] + "  "
    body = "".join(indent + line if line.strip() else "\n" for line in serve_config.rstrip().splitlines(True))
    old = match.group(0)
    blank_after = len(old) - len(old.rstrip("\n")) - 1  # blank lines between the block and the next key stay
    block = f"{match['indent']}serveConfigV2: |\n{body.rstrip()}\n" + "\n" * blank_after
    return manifest[: match.start()] + block + manifest[match.end() :]


def main() -> int:
    manifest = RAYSERVICE.read_text()
    rendered = render(manifest, SERVE_CONFIG.read_text())
    if rendered != manifest:
        RAYSERVICE.write_text(rendered)
        print(f"updated {RAYSERVICE.relative_to(ROOT)} from {SERVE_CONFIG.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
