import pytest

from app.catalog import Catalog, EmbedderInfo, Manifest, now_iso
from app.ingest.inputs import expand
from app.storage import Storage


def manifest(kind="datasets"):
    return Manifest(kind=kind, version=0, created_at=now_iso(), embedder=EmbedderInfo(name="m", revision="r", dim=4))


def test_atomic_and_exclusive_writes(tmp_path):
    s = Storage(str(tmp_path))
    s.write_bytes("a/b.txt", b"1")
    assert s.read_bytes("a/b.txt") == b"1" and s.listdir("a") == ["b.txt"]
    assert s.create_exclusive("a/c.txt", b"x") is True
    assert s.create_exclusive("a/c.txt", b"y") is False
    assert s.read_bytes("a/c.txt") == b"x"
    assert not [p for p in tmp_path.rglob("*") if ".tmp-" in p.name]


def test_uri_roots_work_through_pyarrow(tmp_path):
    s = Storage(f"file://{tmp_path}")
    s.write_json("x/y.json", {"a": 1})
    assert s.read_json("x/y.json") == {"a": 1} and s.list_files("x") == ["x/y.json"]


def test_publish_numbers_versions_and_hides_unfinished(tmp_path):
    s = Storage(str(tmp_path))
    c = Catalog(s)
    assert c.latest("datasets") is None
    with pytest.raises(ValueError, match="no dataset version is published"):
        c.resolve("datasets", None)
    s.write_bytes("datasets/segments/r1/part.parquet", b"data")
    m = manifest()
    m.files = [c.file_entry("datasets/segments/r1/part.parquet")]
    assert c.publish(m).version == 1
    s.makedirs("datasets/2")  # a publisher that died before writing its manifest
    assert [v.version for v in c.versions("datasets")] == [1]
    assert c.publish(manifest()).version == 3
    assert c.latest("datasets").version == 3
    assert c.publish_as(manifest(), 3) is False and c.latest("datasets").version == 3  # taken: not overwritten
    assert c.publish_as(manifest(), 4) is True
    with pytest.raises(ValueError, match=r"dataset version 7 does not exist \(published: \[1, 3, 4\]\)"):
        c.get("datasets", 7)


def test_verify_detects_damage(tmp_path):
    s = Storage(str(tmp_path))
    c = Catalog(s)
    s.write_bytes("f.bin", b"abc")
    m = manifest()
    m.files = [c.file_entry("f.bin")]
    assert c.verify(m) == []
    s.write_bytes("f.bin", b"abd")
    assert c.verify(m) == ["f.bin: checksum mismatch"]


def test_expand_inputs(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("a")
    (tmp_path / "d" / "b.md").write_text("b")
    (tmp_path / "d" / "c.bin").write_bytes(b"\x7fELF\x02\x01\x01" + bytes(64))
    (tmp_path / "d" / "c.pdf").write_text("c")  # a PDF by name: read, and quarantined if it is not one
    (tmp_path / "d" / "f").write_bytes((tmp_path / "d" / "c.bin").read_bytes())  # no extension, known by content
    (tmp_path / "e.pdf").write_text("e")
    got = expand([str(tmp_path / "d")])
    assert [p.rsplit("/", 1)[1] for p in got.files] == ["a.txt", "b.md", "c.pdf"]
    assert [(k["source"].rsplit("/", 1)[1], k["type"]) for k in got.skipped] == [("c.bin", "ELF executable"),
                                                                                  ("f", "ELF executable")]
    assert len(expand([str(tmp_path / "d" / "*.md")]).files) == 1
    assert expand([f"file://{tmp_path}/d"]).files == got.files
    assert expand([str(tmp_path / "e.pdf")]).files[0].endswith("e.pdf")  # named: quarantined later, not skipped
    with pytest.raises(ValueError, match="input path .*missing does not exist"):
        expand([str(tmp_path / "missing")])
    with pytest.raises(ValueError, match="mix filesystems"):
        expand([str(tmp_path), "s3://bucket/x"])
    with pytest.raises(ValueError, match="no input paths"):
        expand([])


def test_expand_refuses_links_out_of_the_roots_and_oversized_files(tmp_path):
    root, out = tmp_path / "root", tmp_path / "out"
    (root / "sub").mkdir(parents=True)
    out.mkdir()
    (out / "secret.txt").write_text("s")
    (root / "a.txt").write_text("a" * 10)
    (root / "link.txt").symlink_to(out / "secret.txt")
    (root / "sub" / "out").symlink_to(out, target_is_directory=True)
    (root / "sub" / "loop").symlink_to(root, target_is_directory=True)
    got = expand([str(root)])
    assert got.files == [str(root / "a.txt")]
    assert [(r["source"].removeprefix(str(root)), r["reason"]) for r in got.refused] == [
        ("/link.txt", "outside_roots"), ("/sub/out", "outside_roots")]
    assert expand([str(root / "*.txt")]).refused[0]["source"].endswith("link.txt")  # a glob's root is its directory
    assert expand([str(root / "link.txt")]).files == [str(root / "link.txt")]  # named: the user chose it
    follow = expand([str(root)], follow_symlinks=True)  # the loop is walked once, not forever
    assert [f.removeprefix(str(root)) for f in follow.files] == ["/a.txt", "/link.txt", "/sub/out/secret.txt"]
    small = expand([str(root), str(out)], max_file_bytes=5)
    assert small.files == [str(out / "secret.txt")] and small.refused[0]["reason"] == "too_large"
    with pytest.raises(ValueError, match=r"no supported files.*a\.txt \(too_large\)"):
        expand([str(root / "a.txt")], max_file_bytes=5)
