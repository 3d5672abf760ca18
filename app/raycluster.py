"""Connecting to Ray: a given address, or the local Ray on this machine (started as a persistent `ray start
--head` when none runs, so detached services outlive the command that started them)."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil
import ray

from app import envs
from app.errors import RaglineError, Unavailable

NAMESPACE = "ragline"
log = logging.getLogger(__name__)


def connect(address: str | None) -> None:
    """Join the Ray cluster at `address`, or the local one (starting it if needed), in the ragline namespace."""
    try:
        _connect(address)
    except RuntimeError as e:  # Ray refused to start or join (a version mismatch, say): its message says why
        raise RaglineError(str(e)) from e


def init_local(serve_env: Mapping[str, str] | None = None, **kwargs: Any) -> None:
    """A private local Ray for this process (tests, benchmarks): `ray.init(address="local", **kwargs)`, its
    processes given the Serve settings Ragline's own `ray start` gives them (envs.RAY_SERVE_ENV), or `serve_env`
    over them."""
    # the Ray processes started below inherit this process's environment
    os.environ.update({**envs.RAY_SERVE_ENV, **(serve_env or {})})
    reap_orphaned_haproxy()
    ray.init(address="local", **kwargs)


def reap_orphaned_haproxy() -> list[int]:
    """Kill the HAProxy processes of Serve's proxy whose Ray is gone; their PIDs. Ray's HAProxyManager actor starts
    HAProxy and stops it on a clean shutdown, but an actor killed outright (`ray stop --force`, a crash, an OOM kill)
    leaves it running, holding the Serve HTTP port and its own 8404 and 9101: the next Serve on this machine then
    fails to start its proxy ("Address already in use"). Called before Ragline starts a local Ray. Such a process is
    one whose parent is no longer an HAProxyManager actor (`ray::HAProxyManager...`)."""
    reaped = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] != "haproxy" or not any("haproxy-serve" in a for a in proc.info["cmdline"] or []):
            continue
        # it may exit meanwhile (NoSuchProcess), or belong to another user (AccessDenied): then it is not ours
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            parent = proc.parent()
            if parent is None or not " ".join(parent.cmdline()).startswith("ray::HAProxyManager"):
                proc.kill()
                reaped.append(proc.pid)
    if reaped:
        log.warning("stopped HAProxy left running by a Ray that was killed (pid %s): it held Serve's ports",
                    ", ".join(map(str, reaped)))
    return reaped


def _connect(address: str | None) -> None:
    if ray.is_initialized():
        return
    if address:
        try:
            ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)
        except ConnectionError as e:  # unreachable, or refused for want of the cluster's token
            raise Unavailable(f"cannot join the Ray cluster at {address}: {str(e).splitlines()[0]} (a cluster "
                              "with token authentication, Ray's default, needs RAY_AUTH_MODE=token here and its "
                              "token in RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)") from e
        return
    try:
        ray.init(address="auto", namespace=NAMESPACE, log_to_driver=False)
    except ConnectionError:
        reap_orphaned_haproxy()
        bin_dir = Path(sys.executable).parent
        ray_bin = bin_dir / "ray"
        cmd = [str(ray_bin) if ray_bin.exists() else "ray", "start", "--head", "--disable-usage-stats"]
        # jobs submitted to this Ray (`ragline submit`) run `python ...` from its PATH: make it this environment's
        env = {**os.environ, **envs.RAY_SERVE_ENV, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
        if not envs.RAY_AUTH_MODE and not envs.ray_auth_token():
            # `ray start --head` turns token authentication on only when a token exists (`ray.init()` makes one
            # itself): without it, anyone who reaches the ports could run code here. The token goes to
            # ~/.ray/auth_token, where every Ray client on this machine finds it.
            made = subprocess.run([cmd[0], "get-auth-token", "--generate"], capture_output=True, text=True, env=env)
            if made.returncode != 0:
                raise RaglineError(f"could not make a Ray auth token: {made.stderr[-2000:]}") from None
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise RaglineError(f"could not start a local Ray (`{' '.join(cmd)}`):\n{done.stderr[-2000:]}") from None
        ray.init(address="auto", namespace=NAMESPACE, log_to_driver=False)
