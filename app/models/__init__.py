"""One home per model role: resolving, loading, and the text each model sees.

`embedder` (the sentence embedder: chunks and queries), `cross_encoder` (the reranker), `generator` (the LLM) and
`trained` (versions Ragline trained itself, named `catalog:NAME[:VERSION]`). Serving (`deployments/`), training
(`app.train`) and evaluation (`app.eval`) all load models through here: packaged defaults, local directories or
hub ids.
"""

from pathlib import Path

from app.errors import NotFound, UserError


def local_or_hub(spec: str, what: str) -> str:
    """A local model directory (checked, made absolute) or, if `spec` does not look like a path, a hub id that
    the loader downloads where the cluster has internet. `what` names the model in errors ("embedder path …")."""
    p = Path(spec).expanduser()
    if p.exists():
        if not (p / "config.json").is_file():
            raise UserError(f"{what} path {p} is not a model directory (no config.json)")
        return str(p.resolve())
    if spec.startswith((".", "/", "~")):
        raise NotFound(f"{what} path {spec} does not exist")
    return spec
