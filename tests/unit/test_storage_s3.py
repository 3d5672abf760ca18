"""Storage, the catalog and the ingest inputs on an s3:// root, against a real S3-protocol server (moto's, on
loopback: tests/s3server.py). S3 has no directories, only keys: a "directory" is a key prefix, and these tests pin
down what Storage makes of that."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from app import apikeys, envs, tracking
from app.catalog import Catalog, EmbedderInfo, Manifest, now_iso
from app.errors import NotFound, UserError
from app.ingest.inputs import expand
from app.storage import Storage
from tests.s3server import S3Server

ELF = b"\x7fELF\x02\x01\x01" + bytes(64)


@pytest.fixture
def s3(s3_bucket: S3Server) -> Storage:
    """A fresh storage root: its own prefix of the session's bucket."""
    return Storage(s3_bucket.fresh_uri("store"))


def key_prefix(storage: Storage) -> str:
    """The storage root's key prefix in the bucket ("store-.../")."""
    return storage.uri.split("://", 1)[1].split("/", 1)[1] + "/"


def test_the_environment_reaches_the_server_from_pyarrow_and_a_child_process(s3_bucket, s3):
    fs, path = pafs.FileSystem.from_uri(s3.uri)
    assert isinstance(fs, pafs.S3FileSystem) and path == s3.uri.removeprefix("s3://")
    assert os.environ["AWS_ENDPOINT_URL"] == s3_bucket.endpoint
    s3.write_bytes("from-parent.txt", b"parent")
    # a child process inherits the environment and reads and writes the same store (as Ray workers started after
    # it was set would)
    code = ("import sys; from app.storage import Storage; s = Storage(sys.argv[1]); "
            "print(s.read_bytes('from-parent.txt').decode()); s.write_bytes('from-child.txt', b'child')")
    out = subprocess.run([sys.executable, "-c", code, s3.uri], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2], check=True).stdout
    assert out.strip() == "parent" and s3.read_bytes("from-child.txt") == b"child"
    # the bytes really are objects in the bucket, under the root's prefix
    assert s3_bucket.keys(key_prefix(s3)) == [key_prefix(s3) + "from-child.txt", key_prefix(s3) + "from-parent.txt"]


def test_bytes_json_and_digests(s3):
    assert not s3.is_local
    s3.write_bytes("a/b/c.bin", b"\x00\x01" * 1000)
    assert s3.read_bytes("a/b/c.bin") == b"\x00\x01" * 1000
    s3.write_bytes("a/b/c.bin", b"again")  # overwrite: a PUT replaces the object
    assert s3.read_bytes("a/b/c.bin") == b"again"
    s3.copy_file("a/b/c.bin", "copies/c.bin")  # the server copies (how a trained model's files are registered)
    assert s3.read_bytes("copies/c.bin") == b"again"
    s3.write_json("a/d.json", {"x": [1, 2], "y": "z"})
    assert s3.read_json("a/d.json") == {"x": [1, 2], "y": "z"}
    assert s3.file_digest("a/b/c.bin") == (5, hashlib.sha256(b"again").hexdigest())
    big = os.urandom(3 << 20)  # read back in the digest's 1 MiB pieces
    s3.write_bytes("big.bin", big)
    assert s3.file_digest("big.bin") == (len(big), hashlib.sha256(big).hexdigest())
    with pytest.raises(FileNotFoundError):
        s3.read_bytes("a/missing.json")


def test_directories_are_prefixes(s3_bucket, s3):
    s3.write_bytes("datasets/1/manifest.json", b"{}")
    s3.write_bytes("datasets/segments/r1/part.parquet", b"p")
    s3.write_bytes("datasets/10/manifest.json", b"{}")
    # a file and every prefix of one exist; a key's partial name does not
    assert s3.exists("datasets/1/manifest.json")
    assert s3.exists("datasets") and s3.exists("datasets/") and s3.exists("datasets/segments/r1")
    assert not s3.exists("datasets/1/manifest") and not s3.exists("datasets/2") and not s3.exists("data")
    assert s3.exists("")  # the root, once anything is under it
    assert Storage(s3_bucket.fresh_uri("empty")).exists("") is False
    # listdir: names directly under a prefix, files and sub-prefixes alike; a missing prefix lists as empty
    assert s3.listdir("datasets") == ["1", "10", "segments"]
    assert s3.listdir("datasets/") == ["1", "10", "segments"]
    assert s3.listdir("nothing/here") == []
    assert s3.listdir("datasets/1/manifest.json/") == []  # a file is no directory
    # list_files: root-relative files, recursively, never the directory markers pyarrow may leave
    assert s3.list_files("datasets") == ["datasets/1/manifest.json", "datasets/10/manifest.json",
                                         "datasets/segments/r1/part.parquet"]
    assert s3.list_files("/datasets/segments/") == ["datasets/segments/r1/part.parquet"]
    assert s3.list_files("missing") == []
    # makedirs makes an empty "directory" that exists and lists (a marker object)
    s3.makedirs("datasets/2")
    assert s3.exists("datasets/2") and s3.listdir("datasets") == ["1", "10", "2", "segments"]
    assert s3.list_files("datasets/2") == []


def test_delete_dir_takes_the_prefix_and_nothing_beside_it(s3):
    for rel in ("idx/1/a.bin", "idx/1/sub/b.bin", "idx/10/c.bin", "idx/1.json"):
        s3.write_bytes(rel, b"x")
    s3.delete_dir("idx/1")
    assert not s3.exists("idx/1") and s3.list_files("idx") == ["idx/1.json", "idx/10/c.bin"]
    s3.delete_dir("idx/1")  # gone already: nothing to do
    s3.delete_dir("never/was")
    s3.delete_dir("idx/10/")
    assert s3.list_files("idx") == ["idx/1.json"]


def test_create_exclusive_is_check_then_put(s3):
    """Not atomic on S3 (pyarrow sends no If-None-Match): a second writer between the check and the PUT would
    win. What it does guarantee against one writer: an existing object is never overwritten."""
    assert s3.create_exclusive("runs/x/chaos-fired", b"1") is True
    assert s3.create_exclusive("runs/x/chaos-fired", b"2") is False
    assert s3.read_bytes("runs/x/chaos-fired") == b"1"
    s3.makedirs("runs/y")
    assert s3.create_exclusive("runs/y", b"file over a prefix") is False  # a prefix is taken too


def test_slashes_in_relative_paths(s3):
    """S3 keys are strings: "a//b" would be another key than "a/b" (pyarrow refuses it). Root-relative paths are
    joined into keys with single slashes however they were written."""
    s3.write_bytes("/x//y/z.txt", b"z")
    assert s3.read_bytes("x/y/z.txt") == b"z" and s3.list_files("x") == ["x/y/z.txt"]
    assert s3.path("x/y/") == s3.path("x//y") == s3.path("/x/y")
    root = Storage(s3.uri + "/")  # a root URI with a trailing slash is the same root
    assert root.read_bytes("x/y/z.txt") == b"z" and root.list_files("x/") == ["x/y/z.txt"]


def test_upload_and_download_dirs(s3, tmp_path):
    src = tmp_path / "src"
    (src / "sub" / "deeper").mkdir(parents=True)
    (src / "a.json").write_text('{"a": 1}')
    (src / "sub" / "b.bin").write_bytes(b"\x00" * 10)
    (src / "sub" / "deeper" / "c.txt").write_text("c")
    want = ["idx/3/a.json", "idx/3/sub/b.bin", "idx/3/sub/deeper/c.txt"]
    assert s3.upload_dir(src, "idx/3") == want
    assert s3.list_files("idx/3") == want
    s3.delete_dir("idx/4")
    assert [s3.path(w) for w in s3.upload_dir(src, "idx/4/")] == [s3.path(w.replace("/3/", "/4/")) for w in want]
    for rel, dest in (("idx/3", tmp_path / "d1"), ("idx/4/", tmp_path / "d2"), ("/idx/3", tmp_path / "d3")):
        assert s3.download_dir(rel, dest) == dest
        got = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
        assert got == ["a.json", "sub/b.bin", "sub/deeper/c.txt"], rel
        assert (dest / "sub" / "b.bin").read_bytes() == b"\x00" * 10
    whole = tmp_path / "whole"
    Storage(s3.uri + "/idx/3").download_dir("", whole)  # a root's every file
    assert sorted(p.relative_to(whole).as_posix() for p in whole.rglob("*") if p.is_file()) == [
        "a.json", "sub/b.bin", "sub/deeper/c.txt"]


def manifest(kind="datasets") -> Manifest:
    return Manifest(kind=kind, version=0, created_at=now_iso(), embedder=EmbedderInfo(name="m", revision="r", dim=4))


def test_catalog_publishes_and_lists_versions(s3):
    c = Catalog(s3)
    assert c.versions("datasets") == [] and c.latest("datasets") is None and c.next_version("datasets") == 1
    with pytest.raises(NotFound, match="no dataset version is published"):
        c.resolve("datasets", None)
    s3.write_bytes("datasets/segments/r1/chunks-0.parquet", b"rows")
    m = manifest()
    m.files = [c.file_entry("datasets/segments/r1/chunks-0.parquet", rows=1)]
    assert c.publish(m).version == 1
    s3.makedirs("datasets/2")  # a publisher that died before its manifest: no version, but its number is used
    s3.write_bytes("datasets/3/part.bin", b"half")  # ... or one that wrote files and died
    assert [v.version for v in c.versions("datasets")] == [1]
    assert c.publish(manifest()).version == 4
    assert c.publish_as(manifest(), 4) is False  # taken: not overwritten
    assert c.publish_as(manifest(), 12) is True  # numbers sort as numbers, not as names
    assert [v.version for v in c.versions("datasets")] == [1, 4, 12] and c.latest("datasets").version == 12
    got = c.get("datasets", 1)
    assert got.files[0].path == "datasets/segments/r1/chunks-0.parquet" and got.files[0].rows == 1
    assert c.verify(got) == []
    s3.write_bytes("datasets/segments/r1/chunks-0.parquet", b"ROWS")
    assert c.verify(got) == ["datasets/segments/r1/chunks-0.parquet: checksum mismatch"]
    s3.delete_dir("datasets/segments/r1")
    assert c.verify(got) == ["datasets/segments/r1/chunks-0.parquet: missing"]
    with pytest.raises(NotFound, match=r"dataset version 7 does not exist \(published: \[1, 4, 12\]\)"):
        c.get("datasets", 7)
    assert json.loads(s3.read_bytes("datasets/12/manifest.json"))["version"] == 12
    assert c.publish(manifest("indexes")).version == 1 and c.latest("indexes").kind == "indexes"


def test_catalog_model_versions(s3):
    c = Catalog(s3)
    s3.write_bytes("models/sft/files-a/config.json", b"{}")
    s3.write_bytes("models/sft/files-a/model.safetensors", b"w" * 100)
    fields = {"task": "sft", "run": "r1", "base_model": "tiny", "dir": "models/sft/files-a"}
    first = c.publish_model("sft", fields)
    assert first.version == 1 and [f.path for f in first.files] == ["models/sft/files-a/config.json",
                                                                     "models/sft/files-a/model.safetensors"]
    assert c.publish_model("sft", fields).version == 2
    assert c.model_names() == ["sft"] and [m.version for m in c.model_versions("sft")] == [1, 2]
    assert c.promoted("sft") is None
    c.promote("sft", 1)
    assert c.promoted("sft").version == 1


@pytest.fixture(scope="module")
def corpus(s3_bucket) -> str:
    """s3://bucket/corpus-.../: two text files, a nested Markdown file, a hidden file, a PDF by name, an ELF
    binary (unsupported: skipped) and an extensionless ELF."""
    root = Storage(s3_bucket.fresh_uri("corpus"))
    root.write_bytes("a.txt", b"alpha")
    root.write_bytes("b.md", b"# beta")
    root.write_bytes("sub/c.md", b"# gamma")
    root.write_bytes(".hidden.txt", b"hidden")
    root.write_bytes("d.pdf", b"%PDF-1.4 not really")
    root.write_bytes("tool.bin", ELF)
    root.write_bytes("sub/noext", ELF)
    return root.uri


def test_expand_a_directory_on_s3(corpus):
    bucket_path = corpus.removeprefix("s3://")
    for given in (corpus, corpus + "/"):
        got = expand([given])
        assert isinstance(got.filesystem, pafs.S3FileSystem) and got.uri_prefix == "s3://"
        assert [f.removeprefix(bucket_path + "/") for f in got.files] == ["a.txt", "b.md", "d.pdf", "sub/c.md"]
        assert [(k["source"], k["type"]) for k in got.skipped] == [
            (f"{corpus}/sub/noext", "ELF executable"), (f"{corpus}/tool.bin", "ELF executable")]
        assert got.source(got.files[0]) == f"{corpus}/a.txt"
        with got.filesystem.open_input_stream(got.files[0]) as f:  # what the readers then do with it
            assert f.read() == b"alpha"


def test_expand_files_globs_and_missing_paths_on_s3(corpus):
    bucket_path = corpus.removeprefix("s3://")
    assert expand([f"{corpus}/tool.bin"]).files == [f"{bucket_path}/tool.bin"]  # named: read (and quarantined)
    # globs match as the local glob.glob(recursive=True) does: * within a name, ** across directories
    assert expand([f"{corpus}/*.md"]).files == [f"{bucket_path}/b.md"]
    assert expand([f"{corpus}/**/*.md"]).files == [f"{bucket_path}/b.md", f"{bucket_path}/sub/c.md"]
    assert expand([f"{corpus}/?.txt"]).files == [f"{bucket_path}/a.txt"]  # ? and [ are no URI syntax here
    assert expand([f"{corpus}/[ab].*"]).files == [f"{bucket_path}/a.txt", f"{bucket_path}/b.md"]
    assert expand([f"{corpus}/.*"]).files == [f"{bucket_path}/.hidden.txt"]  # hidden: only when asked for
    assert expand([f"{corpus}/s?b/*"]).files == [f"{bucket_path}/sub/c.md"]
    assert expand([f"{corpus}/sub/*.md", f"{corpus}/a.txt"]).files == [f"{bucket_path}/a.txt",
                                                                      f"{bucket_path}/sub/c.md"]
    got = expand([corpus], max_file_bytes=5)
    assert [r["source"] for r in got.refused] == [f"{corpus}/b.md", f"{corpus}/d.pdf", f"{corpus}/sub/c.md"]
    assert {r["reason"] for r in got.refused} == {"too_large"}
    with pytest.raises(NotFound, match=r"input path s3://.*/missing does not exist"):
        expand([f"{corpus}/missing"])
    with pytest.raises(NotFound, match="does not exist"):
        expand([f"{corpus}/*.docx"])
    with pytest.raises(ValueError, match="no supported files"):
        expand([f"{corpus}/tool*"])


def test_download_dir_is_whole_or_absent(s3, tmp_path, monkeypatch):
    """A served index or model is mirrored to a local cache that its loader trusts when it finds one file there:
    a download cut short must leave nothing, and a second download must not disturb the first's copy."""
    for name in ("a.bin", "b.bin", "c.bin"):
        s3.write_bytes(f"idx/9/{name}", name.encode())
    dest = tmp_path / "cache" / "key"
    read, calls = Storage.read_bytes, []

    def flaky(self, rel):
        calls.append(rel)
        if len(calls) == 2:
            raise OSError("connection reset")
        return read(self, rel)

    monkeypatch.setattr(Storage, "read_bytes", flaky)
    with pytest.raises(OSError, match="connection reset"):
        s3.download_dir("idx/9", dest)
    assert not dest.exists() and list((tmp_path / "cache").iterdir()) == []  # no half copy, no temporary left
    monkeypatch.setattr(Storage, "read_bytes", read)
    assert s3.download_dir("idx/9", dest) == dest and (dest / "c.bin").read_bytes() == b"c.bin"
    s3.write_bytes("idx/9/a.bin", b"changed")
    s3.download_dir("idx/9", dest)  # another replica's download, finishing second: the first copy stays
    assert (dest / "a.bin").read_bytes() == b"a.bin" and len(list((tmp_path / "cache").iterdir())) == 1
    empty = tmp_path / "cache" / "empty"
    empty.mkdir()
    assert sorted(p.name for p in s3.download_dir("idx/9", empty).iterdir()) == ["a.bin", "b.bin", "c.bin"]


def test_a_key_ring_follows_the_key_file_of_a_root_on_s3(s3, monkeypatch):
    """A replica of a graph served from an S3 root takes added and revoked keys without a restart, as from a local
    root; the bucket is looked at from a thread, so a request never waits on it."""
    (first,), where, generated = apikeys.load(s3)
    assert generated == first and where == s3.path(apikeys.KEY_FILE)
    ring = apikeys.ring(s3)[0]
    monkeypatch.setattr(apikeys, "RELOAD_EVERY_S", 0.0)
    added = apikeys.new_key()

    def until(pred) -> None:
        deadline = time.monotonic() + 10
        while not pred():
            assert time.monotonic() < deadline, "the ring did not follow the key file"
            time.sleep(0.05)

    s3.write_bytes(apikeys.KEY_FILE, f"{first}\n{added} collections=hr\n".encode())
    until(lambda: ring.matches(added))
    assert ring.identify(added).scope.collections == {"hr"}
    s3.write_bytes(apikeys.KEY_FILE, f"{added}\n".encode())  # the first key revoked
    until(lambda: not ring.matches(first))
    s3.write_bytes(apikeys.KEY_FILE, b"# mid-edit\n")  # a file with no key: the ring keeps the keys it had
    time.sleep(0.5)
    assert ring.matches(added) and not ring.matches(first)
    s3.fs.delete_file(s3.path(apikeys.KEY_FILE))
    time.sleep(0.5)
    assert ring.matches(added)
    until(lambda: not ring.looking)


def test_runs_of_a_root_on_s3_are_tracked_where_mlflow_is_told(s3, tmp_path, monkeypatch):
    """MLflow keeps no file store on an object store: a run there needs a tracking URI, from the job's config or
    MLflow's own MLFLOW_TRACKING_URI, and is refused before it starts, saying so, without either."""
    monkeypatch.setattr(envs, "MLFLOW_TRACKING_URI", "")
    with pytest.raises(UserError, match=r"train.mlflow_tracking_uri or MLFLOW_TRACKING_URI"):
        tracking.tracking_uri(None, s3)
    monkeypatch.setattr(envs, "MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    assert tracking.tracking_uri(None, s3) == (tmp_path / "mlruns").as_uri()
    assert tracking.tracking_uri("http://mlflow:5000", s3) == "http://mlflow:5000"  # the config's wins
    assert tracking.tracking_uri(None, Storage(str(tmp_path / "local"))) == (tmp_path / "mlruns").as_uri()


def test_a_json_file_rewritten_while_it_is_read_is_read_whole(s3):
    """A read on S3 is a HEAD for the size and a GET of that many bytes: a run record rewritten longer in between
    came back cut short, and a status call failed on it. Every read gives one whole version."""
    versions = [{"state": "running", "progress": "x" * n} for n in (10, 4000, 200, 9000)]
    s3.write_json("runs/r.json", versions[0])
    stop = threading.Event()

    def rewrite() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            s3.write_json("runs/r.json", versions[i % len(versions)])

    writer = threading.Thread(target=rewrite)
    writer.start()
    try:
        seen = [s3.read_json("runs/r.json") for _ in range(60)]
    finally:
        stop.set()
        writer.join()
    assert all(v in versions for v in seen) and len({len(v["progress"]) for v in seen}) > 1
