"""Pure logic of `ragline submit` / `status` against a cluster: addresses, the job's entrypoint, Ray's token."""

import shlex
import subprocess

import pytest

from app import envs, remote


def test_dashboard_address():
    assert remote.dashboard_url("http://head:8265/") == "http://head:8265"
    assert remote.dashboard_url(None) == envs.LOCAL_DASHBOARD
    with pytest.raises(ValueError, match="not a dashboard address"):
        remote.dashboard_url("ray://head:10001")


def test_job_entrypoint_runs_the_uploaded_cli_in_process():
    cmd = remote.job_command("ingest", ["docs dir/", "--json"], ["--storage", "s3://b/r", "--set", "a.b=1"])
    assert shlex.split(cmd) == ["python", "-m", "app.cli", "--storage", "s3://b/r", "--set", "a.b=1", "ingest",
                                "docs dir/", "--json", "--in-process"]
    assert shlex.split(remote.job_command("eval", ["retrieval"], []))[-1] == "retrieval"
    with pytest.raises(ValueError, match="cannot submit 'serve'"):
        remote.job_command("serve", [], [])


def test_token_comes_from_where_ray_looks(tmp_path, monkeypatch):
    monkeypatch.setattr(envs, "RAY_AUTH_TOKEN", " tok-env\n")
    assert remote.auth_headers() == {"Authorization": "Bearer tok-env"}
    monkeypatch.setattr(envs, "RAY_AUTH_TOKEN", "")
    (tmp_path / "t").write_text("tok-file\n")
    monkeypatch.setattr(envs, "RAY_AUTH_TOKEN_PATH", str(tmp_path / "t"))
    assert envs.ray_auth_token() == "tok-file"
    monkeypatch.setattr(envs, "RAY_AUTH_TOKEN_PATH", str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="RAY_AUTH_TOKEN_PATH names"):
        envs.ray_auth_token()
    monkeypatch.setattr(envs, "RAY_AUTH_TOKEN_PATH", "")
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ray/auth_token: auth off, no header
    assert remote.auth_headers() == {}


def test_a_local_head_starts_with_token_authentication(monkeypatch):
    """With no token anywhere, one is made before `ray start --head`, which turns token auth on only then."""
    from app import raycluster

    calls: list[list[str]] = []
    inits = iter([ConnectionError("no Ray running"), None])

    def init(**_: object) -> None:
        if (e := next(inits)) is not None:
            raise e

    monkeypatch.setattr(raycluster.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(raycluster.ray, "init", init)
    monkeypatch.setattr(raycluster.subprocess, "run", lambda cmd, **_: calls.append(cmd) or
                        subprocess.CompletedProcess(cmd, 0, "", ""))
    monkeypatch.setattr(raycluster.envs, "RAY_AUTH_MODE", "")
    monkeypatch.setattr(raycluster.envs, "ray_auth_token", lambda: "")
    raycluster.connect(None)
    assert [c[1:] for c in calls] == [["get-auth-token", "--generate"], ["start", "--head", "--disable-usage-stats"]]
