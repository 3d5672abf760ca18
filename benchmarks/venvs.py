"""A benchmark's own virtual environment for the peers it measures (unstructured, LlamaIndex, Haystack): made with
`python3.11 -m venv` and pip on first use, remade when its requirements change, never part of Ragline's own
dependencies."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path


def own_env(directory: Path, stamp_name: str, requirements: list[str],
            finish: Callable[[Path], None] | None = None) -> Path:
    """The environment's python. `finish(python)` runs once after pip (a probe, a stand-in package); the stamp
    file records the requirements it was made with."""
    python = directory / "bin" / "python"
    stamp = directory / stamp_name
    want = {"requirements": requirements}
    if python.exists() and stamp.is_file() and json.loads(stamp.read_text()) == want:
        return python
    print(f"making {directory} ({' '.join(requirements)}); a few minutes, once", flush=True)
    shutil.rmtree(directory, ignore_errors=True)
    step([shutil.which("python3.11") or sys.executable, "-m", "venv", str(directory)])
    step([str(python), "-m", "pip", "install", "--quiet", *requirements])
    if finish is not None:
        finish(python)
    stamp.write_text(json.dumps(want))
    return python


def step(argv: list[str], env: dict[str, str] | None = None) -> None:
    """A step of making the environment; its output (pip's) shown only when it fails."""
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed (exit {done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
