"""A running cluster, reached through its dashboard's REST API (what `ray job submit` and `serve deploy` use):
job submission with log streaming, Serve deploys, and the jobs / Serve status that `ragline status` shows.

Ray's token authentication is on by default in Ray 2.60; the token is taken from the places Ray itself reads
(RAY_AUTH_TOKEN, the file RAY_AUTH_TOKEN_PATH names, ~/.ray/auth_token) and sent as a bearer header.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from pydantic import BaseModel

from app import envs
from app.errors import RaglineError, Unavailable, UserError

if TYPE_CHECKING:
    from ray.serve.schema import ServeDeploySchema

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# What a job's working directory never needs to carry (the cluster has its own models and storage). Ray itself
# leaves out .git and .venv and honours the directory's .gitignore.
WORKING_DIR_EXCLUDES = [".ragline", ".ragline-bench", ".mypy_cache", ".ruff_cache", ".pytest_cache", "__pycache__",
                        "*.egg-info", "benchmarks/results"]
# Jobs whose driver does the work itself, so the job's status is the work's status.
IN_PROCESS = {"ingest": ["--in-process"], "train": ["--in-process"], "eval": [], "adapt": []}
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


def is_dashboard_url(address: str | None) -> bool:
    return bool(address) and str(address).startswith(("http://", "https://"))


def dashboard_url(address: str | None) -> str:
    """The dashboard (Jobs / Serve REST) address: an http(s) --address or RAY_ADDRESS, else the local default."""
    if is_dashboard_url(address):
        return str(address).rstrip("/")
    if address:
        raise UserError(f"{address!r} is not a dashboard address: give --address http://HEAD:8265 (on a `ray up` "
                         "cluster, `ray dashboard cluster/<cloud>.yaml` forwards it to 127.0.0.1:8265)")
    return envs.LOCAL_DASHBOARD


def auth_headers() -> dict[str, str]:
    token = envs.ray_auth_token()
    return {"Authorization": f"Bearer {token}"} if token else {}


class Unreachable(Unavailable):
    """No dashboard answers at the address."""


class Job(BaseModel):
    """A job as the dashboard lists it (times in ms since the epoch)."""

    submission_id: str | None
    status: str
    entrypoint: str
    start_time: int | None
    end_time: int | None
    message: str | None


class DeploymentState(BaseModel):
    status: str | None
    replicas: int


class ServeApplication(BaseModel):
    status: str | None
    message: str | None
    route_prefix: str | None
    deployments: dict[str, DeploymentState]


class ClusterStatus(BaseModel):
    """What `ragline status` shows of a cluster: its jobs and Serve applications, or (no dashboard, `dashboard`
    None) a note saying where none answered. Dumped with `exclude_unset`, it has only the fields it was given."""

    dashboard: str | None
    jobs: list[Job] | None = None
    serve: dict[str, ServeApplication] | None = None
    note: str | None = None


def _client(kind: str, url: str) -> Any:
    from ray.dashboard.modules.serve.sdk import ServeSubmissionClient
    from ray.job_submission import JobSubmissionClient

    cls = JobSubmissionClient if kind == "jobs" else ServeSubmissionClient
    try:  # both clients check the connection (and Ray's version) when they are made
        return cls(url, headers=auth_headers())
    except ConnectionError as e:
        raise Unreachable(f"no Ray dashboard answers at {url}; on a `ray up` cluster, `ray dashboard "
                          "cluster/<cloud>.yaml` forwards it to this machine") from e


def job_command(command: str, args: list[str], global_args: list[str]) -> str:
    """The job's entrypoint: this checkout's CLI (`python -m app.cli`, imported from the uploaded working
    directory), with the driver doing the work itself."""
    if command not in IN_PROCESS:
        raise UserError(f"cannot submit {command!r}: one of {', '.join(IN_PROCESS)}")
    return shlex.join(["python", "-m", "app.cli", *global_args, command, *args, *IN_PROCESS[command]])


def submit(url: str, entrypoint: str, working_dir: Path, submission_id: str | None = None) -> str:
    if not any((working_dir / "app" / cli).is_file() for cli in ("cli/__init__.py", "cli.py")):
        raise UserError(f"working directory {working_dir} is not a Ragline checkout (no app/cli): the job runs "
                        "the code it uploads")
    # Ray logs every .gitignore it honours at INFO; keep the submit output to what the user needs
    logging.getLogger("ray._private.runtime_env.packaging").setLevel(logging.WARNING)
    runtime_env = {"working_dir": str(working_dir), "excludes": WORKING_DIR_EXCLUDES,
                   "env_vars": {"PYTHONUNBUFFERED": "1"}}  # logs stream as they are printed
    return str(_client("jobs", url).submit_job(entrypoint=entrypoint, runtime_env=runtime_env,
                                           submission_id=submission_id))


def follow(url: str, job_id: str, stream: TextIO = sys.stdout) -> str:
    """Streams the job's logs until it ends; returns its final status (SUCCEEDED, FAILED or STOPPED)."""
    client = _client("jobs", url)

    async def tail() -> None:
        async for lines in client.tail_job_logs(job_id):
            stream.write(lines)
            stream.flush()

    asyncio.run(tail())
    # the log stream closes when the driver exits; the status follows a moment later
    while (status := str(client.get_job_status(job_id).value)) not in TERMINAL:
        time.sleep(0.5)
    return status


def jobs(url: str) -> list[Job]:
    """The cluster's jobs, newest first."""
    rows = [Job(submission_id=j.submission_id, status=str(j.status.value), entrypoint=j.entrypoint,
                start_time=j.start_time, end_time=j.end_time, message=j.message)
            for j in _client("jobs", url).list_jobs()]
    return sorted(rows, key=lambda r: r.start_time or 0, reverse=True)


def serve_applications(url: str) -> dict[str, ServeApplication]:
    """Serve applications by name: status, message and each deployment's status and replica count."""
    details = _client("serve", url).get_serve_details()
    return {name: ServeApplication(
        status=a.get("status"), message=a.get("message", ""), route_prefix=a.get("route_prefix"),
        deployments={d: DeploymentState(status=dd.get("status"), replicas=len(dd.get("replicas") or []))
                     for d, dd in (a.get("deployments") or {}).items()})
            for name, a in (details.get("applications") or {}).items()}


def deploy(url: str, schema: ServeDeploySchema, timeout_s: float = 900) -> None:
    """PUT the Serve config (as `serve deploy` does) and wait until every application is RUNNING."""
    _client("serve", url).deploy_applications(schema.model_dump(mode="json", exclude_unset=True))
    names = [a.name for a in schema.applications]
    deadline = time.time() + timeout_s
    while True:
        apps = serve_applications(url)
        states = {n: apps[n].status if n in apps else "NOT_STARTED" for n in names}
        if all(s == "RUNNING" for s in states.values()):
            return
        failed = {n: apps[n].message for n, s in states.items() if s in ("DEPLOY_FAILED", "UNHEALTHY")}
        if failed:
            raise RaglineError(f"Serve application failed to deploy: {failed}")
        if time.time() > deadline:
            raise RaglineError(f"Serve applications not RUNNING after {timeout_s}s: {states}")
        time.sleep(2)
