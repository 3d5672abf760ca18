"""`ray up` for real on this machine: an sshd on 127.0.0.1 with a throwaway key, the on-prem cluster YAML pointed at
it, then `ragline submit ingest` as a Ray job, `ragline serve --address`, a cited answer over HTTP, the job's and the
Serve application's status from the dashboard's REST API (token required), and `ray down`.

The on-prem config is derived from cluster/onprem.yaml: host, user and key are this machine's, `~/ragline` is this
checkout and the head's ports are free ones. `ray up` and `ray down` run `ray stop` on the head, which here is this
machine: every Ray on it stops, so the test skips when a Ray it did not start runs here (the suite runs this tier
before the integration tier starts its session cluster).
"""

from __future__ import annotations

import getpass
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
import yaml

from tests.helpers import PLANTED, ROOT, free_port, write_corpus

pytestmark = pytest.mark.timeout(1800)

BIN = Path(sys.executable).parent
SSHD = Path("/usr/sbin/sshd")
QUESTION = "When do zebras cross the Mara river?"


def run(cmd: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess[str]:
    # the venv first on PATH: `ray up` and `ragline` run this checkout's Ray
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", **kwargs.pop("env", {})}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, **kwargs)


def ensure_packages() -> None:
    """Debian's openssh-server and rsync, installed here when missing (the CI machine starts without them)."""
    if SSHD.exists() and shutil.which("rsync") and shutil.which("ssh"):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("needs openssh-server and rsync: install them (apt-get install openssh-server rsync) or run "
                    "as root on Debian so the test can")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "openssh-server", "openssh-client",
                 "rsync"]):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}"


def refuse_beside_a_running_ray() -> None:
    """`ray up` and `ray down` run `ray stop` on the head, this machine: never stop a Ray this test did not start."""
    running = [p.pid for p in psutil.process_iter(["name"]) if p.info["name"] == "gcs_server"]
    if running:
        pytest.skip(f"a Ray already runs on this machine (gcs_server pid {running[0]}); `ray up`/`ray down` here "
                    "would stop it: `ray stop` it first to run this test")


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_until(pred, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture(scope="module")
def sshd(tmp_path_factory) -> Iterator[dict[str, str]]:
    """An sshd on 127.0.0.1:22 that lets this user in with a key made now, and nothing else."""
    ensure_packages()
    if port_open(22):
        pytest.skip("something already listens on 127.0.0.1:22; the cluster launcher's ssh has no port option")
    d = tmp_path_factory.mktemp("sshd")
    for name in ("host_key", "id_ed25519"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True)
    (d / "authorized_keys").write_text((d / "id_ed25519.pub").read_text())
    (d / "sshd_config").write_text(f"""\
ListenAddress 127.0.0.1
Port 22
HostKey {d / 'host_key'}
AuthorizedKeysFile {d / 'authorized_keys'}
PidFile {d / 'sshd.pid'}
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
Subsystem sftp internal-sftp
""")
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
    proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(d / "sshd_config")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: port_open(22) or proc.poll() is not None, 30, "sshd to listen")
        assert proc.poll() is None, f"sshd exited: {proc.stderr.read() if proc.stderr else ''}"
        probe = ["ssh", "-i", str(d / "id_ed25519"), "-o", "StrictHostKeyChecking=no", "-o",
                 "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", f"{getpass.getuser()}@127.0.0.1", "true"]
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, f"ssh to 127.0.0.1 failed: {done.stderr}"
        yield {"user": getpass.getuser(), "key": str(d / "id_ed25519")}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def derive_onprem(tmp: Path, user: str, key: str, gcs_port: int, dashboard_port: int) -> Path:
    """cluster/onprem.yaml aimed at this machine: the only edits are the ones a user makes (hosts, user, key) plus
    this checkout as the project directory and free ports for the head."""
    text = (ROOT / "cluster" / "onprem.yaml").read_text().replace("~/ragline", str(ROOT))
    text = re.sub(r"--port=6379\b", f"--port={gcs_port}", text)
    text = re.sub(r":6379\b", f":{gcs_port}", text)
    text = re.sub(r"--dashboard-port=8265\b", f"--dashboard-port={dashboard_port}", text)
    config = yaml.safe_load(text)
    config["cluster_name"] = "ragline-e2e"
    config["provider"]["head_ip"] = "127.0.0.1"
    config["provider"]["worker_ips"] = []
    config["min_workers"] = config["max_workers"] = 0
    config["auth"] = {"ssh_user": user, "ssh_private_key": key}
    path = tmp / "onprem-e2e.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def cluster(sshd, tmp_path_factory) -> Iterator[dict[str, str]]:
    refuse_beside_a_running_ray()
    tmp = tmp_path_factory.mktemp("ray-up")
    gcs_port, dashboard_port = free_port(), free_port()
    config = derive_onprem(tmp, sshd["user"], sshd["key"], gcs_port, dashboard_port)
    assert run(["ray", "get-auth-token", "--generate"], 60).returncode == 0  # what the README tells users to do
    bashrc = Path.home() / ".bashrc"  # the setup commands put the project's venv on the login PATH
    saved = bashrc.read_text() if bashrc.exists() else None
    try:
        up = run(["ray", "up", "-y", "--no-config-cache", str(config)], 900, cwd=ROOT)
        assert up.returncode == 0, f"ray up failed:\n{up.stdout[-4000:]}\n{up.stderr[-4000:]}"
        wait_until(lambda: port_open(dashboard_port), 120, "the dashboard")
        yield {"dashboard": f"http://127.0.0.1:{dashboard_port}", "dashboard_port": str(dashboard_port),
               "config": str(config), "tmp": str(tmp)}
    finally:
        if port_open(dashboard_port):  # the last test takes it down; this is for a failure before that
            run(["ray", "down", "-y", str(config)], 300, cwd=ROOT)
        if saved is None:
            bashrc.unlink(missing_ok=True)
        else:
            bashrc.write_text(saved)


def ragline(storage: Path, address: str, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return run([str(BIN / "ragline"), "--storage", str(storage), "--address", address, *args], timeout)


def test_submit_ingest_serve_query_and_watch_over_rest(cluster):
    tmp = Path(cluster["tmp"])
    url = cluster["dashboard"]
    storage = tmp / "store"
    expected = write_corpus(tmp / "corpus")

    # ingest as a Ray job: logs stream back, the exit status is the job's
    done = ragline(storage, url, "--set", "ingest.read.max_error_fraction=0.5", "submit", "ingest",
                   str(tmp / "corpus"), "--submission-id", "e2e-ingest")
    assert done.returncode == 0, done.stderr[-4000:]
    assert "e2e-ingest SUCCEEDED" in done.stderr and "--in-process" in done.stderr
    status = json.loads(ragline(storage, url, "status", "--json").stdout)
    assert [d["version"] for d in status["indexes"]] == [1]
    assert status["datasets"][0]["counts"]["documents"] == expected["kept"]

    # a job that fails: the submit exits non-zero with the job's own error in the streamed logs
    bad = ragline(storage, url, "submit", "ingest", str(tmp / "no-such-dir"), "--submission-id", "e2e-bad")
    assert bad.returncode == 1 and "e2e-bad FAILED" in bad.stderr and "no-such-dir" in bad.stdout + bad.stderr

    # the Serve graph on the cluster, through its dashboard
    port = free_port()
    # the transformers engine: the cluster mechanics are under test here; vLLM through `ragline serve` runs in the
    # demo test and tests/integration/test_serve.py (each vLLM start costs a minute of this 2-core CI)
    served = ragline(storage, url, "--set", "serve.generator.engine=transformers", "serve", "--port", str(port),
                     "--json")
    assert served.returncode == 0, served.stderr[-4000:]
    endpoint = json.loads(served.stdout)
    key = endpoint["new_api_key"]
    r = httpx.post(f"{endpoint['url']}/v1/query", json={"question": QUESTION},
                   headers={"Authorization": f"Bearer {key}"}, timeout=300)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["answer"] and body["citations"][0]["doc_id"] == "zebra" and body["citations"][0]["snippet"] in PLANTED

    # the dashboard's REST API, with Ray's token and without
    token = run(["ray", "get-auth-token"], 60).stdout.strip()
    headers = {"Authorization": f"Bearer {token}"}
    job = httpx.get(f"{url}/api/jobs/e2e-ingest", headers=headers, timeout=30)
    assert job.status_code == 200 and job.json()["status"] == "SUCCEEDED", job.text
    apps = httpx.get(f"{url}/api/serve/applications/", headers=headers, timeout=30)
    assert apps.status_code == 200 and apps.json()["applications"]["ragline"]["status"] == "RUNNING", apps.text
    for path in ("/api/jobs/e2e-ingest", "/api/serve/applications/"):
        assert httpx.get(f"{url}{path}", timeout=30).status_code == 401, path

    # `ragline status` shows the same through the same API
    cluster_status = json.loads(ragline(storage, url, "status", "--json").stdout)["cluster"]
    by_id = {j["submission_id"]: j["status"] for j in cluster_status["jobs"]}
    assert by_id["e2e-ingest"] == "SUCCEEDED" and by_id["e2e-bad"] == "FAILED"
    assert cluster_status["serve"]["ragline"]["status"] == "RUNNING"


def test_ray_down_stops_the_cluster(cluster):
    down = run(["ray", "down", "-y", cluster["config"]], 300, cwd=ROOT)
    assert down.returncode == 0, f"ray down failed:\n{down.stdout[-3000:]}\n{down.stderr[-3000:]}"
    wait_until(lambda: not port_open(int(cluster["dashboard_port"])), 120, "the dashboard to stop")
