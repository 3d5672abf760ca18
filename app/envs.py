"""The one place Ragline reads environment variables.

Everything else takes these values as arguments, so tests and Ray workers see exactly what the caller passed.
"""

import os

from app.errors import NotFound

#: Storage root (local path or any pyarrow.fs URI such as s3://bucket/prefix). Default: ./.ragline
RAGLINE_STORAGE: str = os.environ.get("RAGLINE_STORAGE", "")
#: Ray cluster address (as for ray.init). Empty: start or join a local Ray.
RAY_ADDRESS: str = os.environ.get("RAY_ADDRESS", "")
#: A YAML config file used when --config is not given.
RAGLINE_CONFIG: str = os.environ.get("RAGLINE_CONFIG", "")
#: Comma-separated bearer API keys for the HTTP endpoint.
RAGLINE_API_KEYS: str = os.environ.get("RAGLINE_API_KEYS", "")
#: A file holding API keys, one per line with its scopes (grammar in app/apikeys.py; `ragline keys` edits it).
RAGLINE_API_KEYS_FILE: str = os.environ.get("RAGLINE_API_KEYS_FILE", "")
#: SHA-256 digests of the API keys with their scopes (`sha256:<hex> collections=a,b admin`, entries separated by `;`;
#: comma-separated hex digests are full-scope keys): how `ragline serve` sends keys to replicas elsewhere.
RAGLINE_API_KEY_HASHES: str = os.environ.get("RAGLINE_API_KEY_HASHES", "")
#: MLflow's own variable: where training, eval and adapt runs are tracked when no `mlflow_tracking_uri` is
#: configured. Unset: a file store under a local storage root (a remote root needs one or the other).
MLFLOW_TRACKING_URI: str = os.environ.get("MLFLOW_TRACKING_URI", "")
#: Local cache for converted models. Default: ~/.cache/ragline
RAGLINE_CACHE: str = os.environ.get("RAGLINE_CACHE", "")
#: Caps what `app.hardware` reports of the CPU (avx2, avx512, ...): take an AVX2 machine's choices on a faster one.
RAGLINE_CPU_ISA: str = os.environ.get("RAGLINE_CPU_ISA", "")
#: The kernel libraries' own caps that, beside RAGLINE_CPU_ISA=avx2, hold their code to AVX2 (oneDNN, PyTorch's
#: ATen kernels, MKL's BLAS, which PyTorch's float32 matmuls run); read here only to record which were set.
CPU_HOLD_AVX2 = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
CPU_HOLD_ENV: dict[str, str] = {name: os.environ.get(name, "") for name in CPU_HOLD_AVX2}
#: Ray's authentication mode (token or disabled); unset: token auth, with a token made for a local head.
RAY_AUTH_MODE: str = os.environ.get("RAY_AUTH_MODE", "")
#: Ray's auth token itself, or a file holding it (Ray reads the same two, then ~/.ray/auth_token).
RAY_AUTH_TOKEN: str = os.environ.get("RAY_AUTH_TOKEN", "")
RAY_AUTH_TOKEN_PATH: str = os.environ.get("RAY_AUTH_TOKEN_PATH", "")
#: Ray Serve's settings for a Ray that Ragline starts (`ray start --head` here, the tests' and benchmarks' local Ray;
#: cluster/ sets the same): throughput-optimised Serve (Ray >= 2.55: gRPC between replicas, user code on the
#: replica's own event loop, the garbage collector frozen after start) with HAProxy as its HTTP proxy (the binary
#: comes with ray[serve]): HAProxy listens on the Serve port and passes each request straight to an Ingress replica's
#: own HTTP port, where Serve's Python proxy would parse it and call the replica through Ray. Either can be set in the
#: environment instead (Serve's proxy: RAY_SERVE_ENABLE_HA_PROXY=0 RAY_SERVE_ENABLE_DIRECT_INGRESS=0).
#: A stopping Ingress replica stays reachable for RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S, for load balancers
#: that send to replicas' ports to notice; only HAProxy does here, told within 0.1 s, and Ray's 30 s would hold every
#: Ingress rollover and application deletion that long. 2 s, then the replica refuses and HAProxy retries elsewhere.
RAY_SERVE_DEFAULTS = {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1", "RAY_SERVE_ENABLE_HA_PROXY": "1",
                      "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": "2"}
RAY_SERVE_ENV: dict[str, str] = {name: os.environ.get(name, value) for name, value in RAY_SERVE_DEFAULTS.items()}
#: The dashboard of a local `ray start --head` (its default port).
LOCAL_DASHBOARD = "http://127.0.0.1:8265"


def storage_root() -> str:
    return RAGLINE_STORAGE or "./.ragline"


def ray_address() -> str | None:
    return RAY_ADDRESS or None


def cache_dir() -> str:
    return RAGLINE_CACHE or os.path.expanduser("~/.cache/ragline")


def secret(name: str) -> str:
    """A secret the config names by environment variable (for example the openai engine's API key)."""
    return os.environ.get(name, "")


def ray_auth_token() -> str:
    """Ray's cluster token, from where Ray looks for it; empty when there is none (auth off)."""
    if RAY_AUTH_TOKEN:
        return RAY_AUTH_TOKEN.strip()
    path = os.path.expanduser(RAY_AUTH_TOKEN_PATH or "~/.ray/auth_token")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    if RAY_AUTH_TOKEN_PATH:
        raise NotFound(f"RAY_AUTH_TOKEN_PATH names {path}, which does not exist")
    return ""
