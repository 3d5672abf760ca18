"""The parsing sandbox with real parsers and real limits: a file over the time or memory cap is stopped (its OCR
process with it), reported with the reason, and the next file gets a fresh child."""

import shutil

import psutil
import pytest

from app.config import DocumentsConfig
from app.ingest.parse import Unreadable
from app.ingest.sandbox import Sandbox
from tests import document_files as files

needs_tesseract = pytest.mark.skipif(shutil.which("tesseract") is None, reason="tesseract is not installed")


@pytest.fixture
def sandbox():
    boxes: list[Sandbox] = []

    def make(**limits):
        boxes.append(Sandbox(DocumentsConfig(**limits)))
        return boxes[-1]

    yield make
    for box in boxes:
        box.close()


def test_files_parse_one_after_another_in_one_child(sandbox):
    box = sandbox()
    (doc,) = box.parse("pdf", "a.pdf", files.text_pdf([["Zebras migrate every July."], ["Nobody knows why."]]))
    assert [(p["page"], p["text"].strip()) for p in doc["parts"]] == [(1, "Zebras migrate every July."),
                                                                       (2, "Nobody knows why.")]
    pid = box.proc.pid
    with pytest.raises(Unreadable, match="encrypted PDF"):
        box.parse("pdf", "locked.pdf", files.encrypted(files.text_pdf([["secret"]])))
    box.parse("docx", "b.docx", files.docx_file())
    assert box.proc.pid == pid  # a parser's own refusal does not cost the child


@needs_tesseract
def test_a_file_over_the_time_limit_is_stopped_with_its_ocr(sandbox):
    box = sandbox(timeout_s=0.3)
    slow = files.png(files.text_image([f"line {i} of a long scanned page of text" for i in range(40)], size=48))
    with pytest.raises(Unreadable, match=r"longer than ingest.documents.timeout_s \(0.3 s\)"):
        box.parse("image", "scan.png", slow)
    assert box.proc is None
    leftovers = [p for p in psutil.process_iter(["name"]) if p.info["name"] == "tesseract"]
    assert leftovers == []  # the whole process group went, Tesseract included
    box.cfg = DocumentsConfig()  # the next file, in a fresh child, within its time
    assert box.parse("pdf", "ok.pdf", files.text_pdf([["still parsing"]]))[0]["parts"][0]["text"].strip() == \
        "still parsing"


def test_a_file_over_the_memory_limit_is_stopped(sandbox):
    box = sandbox(memory_mb=256)
    rows = b"id,note\n" + b"".join(b"%d,a note that takes some room\n" % i for i in range(3_000_000))  # 97 MB
    with pytest.raises(Unreadable, match=r"memory_mb \(256 MiB\)"):
        box.parse("csv", "big.csv", rows)
    (doc,) = box.parse("csv", "small.csv", b"id,note\n1,fits\n")
    assert "note: fits" in doc["text"]
