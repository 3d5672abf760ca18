"""Connecting to Ray: a given address, or the local Ray on this machine (started as a persistent `ray start
--head` when none runs, so detached services outlive the command that started them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import ray

NAMESPACE = "ragline"


def connect(address: str | None) -> None:
    """Join the Ray cluster at `address`, or the local one (starting it if needed), in the ragline namespace."""
    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)
        return
    try:
        ray.init(address="auto", namespace=NAMESPACE, log_to_driver=False)
    except ConnectionError:
        ray_bin = Path(sys.executable).parent / "ray"
        cmd = [str(ray_bin) if ray_bin.exists() else "ray", "start", "--head", "--disable-usage-stats"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"could not start a local Ray (`{' '.join(cmd)}`):\n{done.stderr[-2000:]}") from None
        ray.init(address="auto", namespace=NAMESPACE, log_to_driver=False)
