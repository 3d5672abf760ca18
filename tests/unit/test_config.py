import pytest

from app.config import AppConfig, load_config
from app.config_files import parse_overrides


def test_defaults_are_valid():
    cfg = load_config()
    assert isinstance(cfg, AppConfig)
    assert cfg.ingest.dedup.near_threshold == 0.8 and cfg.ingest.dedup.shingle_words == 5


def test_yaml_and_overrides(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("ingest:\n  chunk:\n    chunk_tokens: 128\nsearch:\n  mode: dense\n")
    cfg = load_config(f, ["search.top_k=3", "ingest.dedup.near=false"])
    assert cfg.ingest.chunk.chunk_tokens == 128 and cfg.search.mode == "dense"
    assert cfg.search.top_k == 3 and cfg.ingest.dedup.near is False


def test_unknown_field_is_named(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("ingest:\n  chunk:\n    chunk_tokenz: 128\n")
    with pytest.raises(ValueError, match=r"ingest\.chunk\.chunk_tokenz: Extra inputs"):
        load_config(f)


def test_bad_values_are_named():
    with pytest.raises(ValueError, match=r"ingest\.dedup\.near_threshold"):
        load_config(None, ["ingest.dedup.near_threshold=1.5"])
    with pytest.raises(ValueError, match=r"search\.mode"):
        load_config(None, ["search.mode=fuzzy"])
    with pytest.raises(ValueError, match="overlap_tokens .* must be smaller"):
        load_config(None, ["ingest.chunk.chunk_tokens=32", "ingest.chunk.overlap_tokens=32"])


def test_bad_files(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("ingest: [unclosed\n")
    with pytest.raises(ValueError, match="not valid YAML"):
        load_config(bad)
    lst = tmp_path / "list.yaml"
    lst.write_text("- a\n- b\n")
    with pytest.raises(ValueError, match="mapping at the top level"):
        load_config(lst)


def test_bad_overrides():
    with pytest.raises(ValueError, match="not KEY=VALUE"):
        parse_overrides(["ingest.chunk.chunk_tokens"])
    with pytest.raises(ValueError, match="is not a section"):
        parse_overrides(["a=1", "a.b=2"])


def test_serve_config_for_another_machine_carries_the_config_inline(tmp_path):
    """`ragline serve --address http://…` cannot hand the cluster a local path: the config travels in `args`."""
    from app.serving import load_serve_config
    from app.storage import Storage

    f = tmp_path / "c.yaml"
    f.write_text("search:\n  top_k: 3\n")
    local = load_serve_config(None, Storage(str(tmp_path / "s")), str(f), ["search.mode=dense"])
    remote = load_serve_config(None, Storage(str(tmp_path / "shared")), str(f), ["search.mode=dense"], remote=True)
    assert local.applications[0].args["config_file"] == str(f)
    args = remote.applications[0].args
    assert args["config"] == {"search": {"top_k": 3}} and args["config_file"] is None
    cfg = load_config(None, args["overrides"], inline=args["config"])
    assert (cfg.search.top_k, cfg.search.mode) == (3, "dense")
    with pytest.raises(ValueError, match=r"(?s)inline config.*top_kk"):
        load_config(None, [], inline={"search": {"top_kk": 3}})


def test_the_app_and_the_training_jobs_share_one_config_base():
    from pydantic import BaseModel

    from app import config as app_config
    from app.train import config as job_config

    models = [v for m in (app_config, job_config) for v in vars(m).values()
              if isinstance(v, type) and issubclass(v, BaseModel) and v.__module__ == m.__name__]
    assert len(models) > 10 and all(issubclass(m, app_config.ConfigBase) for m in models)
    assert all(m.model_config["extra"] == "forbid" for m in models)
