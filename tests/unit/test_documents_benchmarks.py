"""The scoring of the document benchmarks (benchmarks/documents_bench.py, documents_quality.py): which words count
for fidelity, which hit finds a SQuAD paragraph, and which page an answer lands on in the rendered PDF."""

from benchmarks.documents_quality import Gold, answer_pages, file_stem, render_pdfs
from benchmarks.documents_worker import words

PARAGRAPH = ("The Normans were the people who in the 10th and 11th centuries gave their name to Normandy, a region "
             "in France. They were descended from Norse raiders and pirates from Denmark, Iceland and Norway.")


def test_fidelity_words_ignore_case_ligatures_and_the_spacing_of_punctuation():
    assert words("Die ﬁrst  Ofﬁce ,\nIn  2015!") == words("die first office, in 2015 !") == [
        "die", "first", "office", "in", "2015"]


def test_a_hit_finds_the_paragraph_with_the_answer_and_eight_of_its_words_in_a_row():
    gold = Gold(("10th and 11th centuries",), PARAGRAPH)
    assert gold.found_by("... the people who in the 10th and 11th centuries gave their name to Normandy ...")
    assert gold.found_by("who in the 10th  and\n11th centuries gave their name")  # whitespace is not a word
    assert not gold.found_by("Norse raiders and pirates from Denmark, Iceland and Norway.")  # no answer
    assert not gold.found_by("In the 10th and 11th centuries, the Vikings raided.")  # the answer, elsewhere
    assert Gold(("Normans",), "The Normans.").found_by("What the Normans. were")  # a paragraph under 8 words


def test_an_answer_lands_on_the_pages_of_the_paragraph_parts_that_hold_its_words():
    parts = [(3, 12), (4, 22)]  # "The Normans ... 11th centuries" on page 3, "gave their name ..." on page 4
    assert answer_pages(PARAGRAPH, PARAGRAPH.index("10th"), "10th and 11th centuries", parts) == {3}
    assert answer_pages(PARAGRAPH, PARAGRAPH.index("Denmark"), "Denmark", parts) == {4}
    assert answer_pages(PARAGRAPH, PARAGRAPH.index("centuries"), "centuries gave", parts) == {3, 4}
    assert answer_pages(PARAGRAPH, PARAGRAPH.index("ormans"), "ormans", parts) == {3}  # inside a word


def test_rendering_records_where_every_word_of_a_paragraph_landed(tmp_path):
    title, context = "Norman_conquest,_1066", f"0: {PARAGRAPH} & more"  # "&" lays out as fragments
    placement, layout = render_pdfs([{"title": title, "paragraphs": [{"context": context}] * 30}], tmp_path)
    assert (tmp_path / f"{file_stem(title)}.pdf").is_file()
    parts = placement[title]
    assert all(sum(n for _, n in p) == len(context.split()) for p in parts)
    assert layout["pages"] > 2 and layout["paragraphs_across_pages"] >= 1
    assert [page for p in parts for page, _ in p] == sorted(page for p in parts for page, _ in p)
