"""Resolve model names to something loadable: packaged defaults, local directories or hub ids."""

from pathlib import Path


def local_or_hub(spec: str, what: str) -> str:
    """A local model directory (checked, made absolute) or, if `spec` does not look like a path, a hub id that
    the loader downloads where the cluster has internet. `what` names the model in errors ("embedder path …")."""
    p = Path(spec).expanduser()
    if p.exists():
        if not (p / "config.json").is_file():
            raise ValueError(f"{what} path {p} is not a model directory (no config.json)")
        return str(p.resolve())
    if spec.startswith((".", "/", "~")):
        raise ValueError(f"{what} path {spec} does not exist")
    return spec
