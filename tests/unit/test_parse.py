import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.config import IngestConfig, ReadConfig
from app.ingest import stages
from app.ingest.documents import detect
from app.ingest.parse import Unreadable, joined_text, parse_file

CFG = ReadConfig()


def parse(source, data):
    return parse_file(source, data, CFG, detect(source, data))


def test_jsonl_fields_and_bad_lines():
    data = "\n".join([json.dumps({"_id": "a", "title": "T", "text": "hello", "year": 2020}), "{broken",
                      json.dumps({"id": "b", "body": "world"}), json.dumps([1, 2]), ""]).encode()
    p = parse("s3://b/x.jsonl", data)
    assert [d["doc_id"] for d in p.docs] == ["a", "b"]
    assert p.docs[0]["title"] == "T" and json.loads(p.docs[0]["metadata"]) == {"year": 2020, "position": "line 1"}
    assert [b["source"] for b in p.bad_records] == ["s3://b/x.jsonl:2", "s3://b/x.jsonl:4"]
    assert "not an object" in p.bad_records[1]["reason"]


def test_jsonl_with_no_usable_line_is_unreadable():
    with pytest.raises(Unreadable, match="none of its 2 lines"):
        parse("x.jsonl", b'{"no_text": 1}\n{bad\n')


def test_parquet_rows_and_corrupt_file():
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": ["1", "2"], "content": ["one", None]}), buf)
    p = parse("t.parquet", buf.getvalue())
    assert [d["text"] for d in p.docs] == ["one"] and "row 1: no text field" in p.bad_records[0]["reason"]
    with pytest.raises(Unreadable, match="not a readable parquet"):
        parse("t.parquet", b"PAR1 nope")
    buf = io.BytesIO()
    pq.write_table(pa.table({"x": [1]}), buf)
    with pytest.raises(Unreadable, match="no text column"):
        parse("t.parquet", buf.getvalue())


def test_html_boilerplate_stripped():
    html = (b"<html><head><title>Snakes</title><style>p{}</style></head><body><nav>Home</nav><header>Site</header>"
            b"<main><h1>Pythons</h1><p>Pythons are constrictors.</p><script>evil()</script></main>"
            b"<footer>(c) 2026</footer></body></html>")
    (d,) = parse("a.html", html).docs
    assert d["title"] == "Snakes"
    text = joined_text(d)  # a page with headings comes as parts, one per heading section
    assert "Pythons are constrictors." in text
    for junk in ("Home", "Site", "evil", "(c) 2026", "p{}"):
        assert junk not in text


def test_markdown_title_text_and_latin1():
    (d,) = parse("/x/notes.md", b"intro\n# Real Title\nbody").docs
    assert d["title"] == "Real Title"
    p = parse("/x/old.txt", "caf\xe9".encode("latin-1"))
    assert p.replaced_bytes == 1 and p.docs[0]["title"] == "old" and p.docs[0]["text"] == "caf\ufffd"


def test_unsupported_type_is_named_by_content():
    with pytest.raises(Unreadable, match="unsupported file type: ELF executable"):
        stages._parse("notes.txt", b"\x7fELF\x02\x01\x01" + bytes(64), IngestConfig(), "unused://")


def test_one_unreadable_file_never_fails_a_run_many_do():
    from app.ingest.pipeline import too_many_unreadable

    assert not too_many_unreadable(1, 1, 0.25) and not too_many_unreadable(1, 3, 0.0), "one bad file: quarantined"
    assert not too_many_unreadable(0, 5, 0.0)
    assert too_many_unreadable(2, 3, 0.5) and not too_many_unreadable(2, 4, 0.5)  # over the fraction, not at it
    assert too_many_unreadable(3, 10, 0.25) and not too_many_unreadable(3, 12, 0.25)


def test_markdown_headings_outside_code_fences_make_sections():
    md = (b"Intro before any heading.\n\n# Migration\nZebras cross.\n\n## Numbers ##\n\n```bash\n# not a heading\n```\n"
          b"~~~\n## nor this\n~~~\n#hashtag is text\n### Deep\nfine\n# Predators\nCrocodiles.\n")
    (d,) = parse("notes.md", md).docs
    assert (d["title"], d["text"], d["unit"]) == ("Migration", "", "")
    assert [(p["section"], p["text"]) for p in d["parts"]] == [
        ("", "Intro before any heading."),
        ("Migration", "# Migration\nZebras cross."),
        ("Migration › Numbers",
         "## Numbers ##\n\n```bash\n# not a heading\n```\n~~~\n## nor this\n~~~\n#hashtag is text"),
        ("Migration › Numbers › Deep", "### Deep\nfine"),
        ("Predators", "# Predators\nCrocodiles."),
    ]
    assert joined_text(d) == ("Intro before any heading.\n\n# Migration\nZebras cross.\n\n## Numbers ##\n\n```bash\n"
                              "# not a heading\n```\n~~~\n## nor this\n~~~\n#hashtag is text\n\n### Deep\nfine\n\n"
                              "# Predators\nCrocodiles.")
    (plain,) = parse("plain.md", b"no headings\n```\n# in code\n```\n").docs
    assert (plain["title"], plain["text"], plain["parts"]) == ("plain", "no headings\n```\n# in code\n```\n", [])


def test_html_headings_make_sections_in_the_kept_body():
    html = (b"<html><head><title>Herds</title></head><body><nav><h2>Menu</h2></nav><main><p>Intro</p>"
            b"<h1>Zebras</h1><p>They cross.</p><h2>Numbers</h2><table><tr><td>2024</td><td>210000</td></tr></table>"
            b"<h3></h3><p>Under an empty heading.</p><h1>Predators</h1><p>Crocodiles <b>wait</b>.</p></main>"
            b"</body></html>")
    (d,) = parse("h.html", html).docs
    assert (d["title"], d["text"]) == ("Herds", "")
    assert [(p["section"], p["text"]) for p in d["parts"]] == [
        ("", "Intro"),
        ("Zebras", "Zebras\nThey cross."),
        ("Zebras › Numbers", "Numbers\n2024\n210000\nUnder an empty heading."),
        ("Predators", "Predators\nCrocodiles\nwait\n."),
    ]
    (flat,) = parse("f.html", b"<p>One</p><!-- note --><p>Two</p>").docs
    assert (flat["text"], flat["parts"]) == ("One\nTwo", [])  # as get_text("\n", strip=True): no comments


def test_joined_text_joins_parts_by_section():
    doc = {"doc_id": "", "source": "s", "title": "", "text": "", "metadata": "{}", "unit": "page",
           "parts": [{"text": "a", "page": 1, "section": "A"}, {"text": "b", "page": 2, "section": "A"},
                     {"text": "c", "page": 3, "section": "B"}]}
    assert joined_text(doc) == "a\nb\n\nc"
    assert joined_text({**doc, "parts": [], "text": "plain"}) == "plain"
