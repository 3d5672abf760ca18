from app.ingest.normalize import content_hash, decode, derived_doc_id, normalize


def test_nfc_composes_accents():
    assert normalize("Cafe\u0301") == "Caf\u00e9"


def test_control_characters_removed_but_newlines_kept():
    assert normalize("a\x00b\x07c\nd\x1b") == "abc\nd"


def test_whitespace_collapsed_and_paragraphs_kept():
    assert normalize("  one \t two\u00a0 three \r\n\r\n\r\n\n four  ") == "one two three\n\nfour"


def test_decode_counts_invalid_bytes():
    text, bad = decode("Café crème".encode("latin-1"))
    assert bad == 2
    assert text == "Caf\ufffd cr\ufffdme"


def test_decode_clean_utf8_and_bom():
    assert decode("\ufeffhéllo".encode()) == ("héllo", 0)


def test_hash_and_ids_are_stable():
    assert content_hash("x") == content_hash("x") != content_hash("y")
    assert derived_doc_id("a.txt", "x") == derived_doc_id("a.txt", "x") != derived_doc_id("b.txt", "x")
