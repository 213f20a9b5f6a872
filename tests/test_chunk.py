import pytest

from rag.retrieval.chunk import chunk_document, chunk_folder, load_kb
from rag.io import InputError


def test_ids_headings_and_whitespace():
    text = "# Title\n\nFirst   para\nwraps here.\n\n\n\n## Sub heading\n\n  Second\tpara.  \n"
    ps = chunk_document("kb-x", text)
    assert [(p.id, p.doc, p.text) for p in ps] == [
        ("kb-x#1", "kb-x", "First para wraps here."),
        ("kb-x#2", "kb-x", "Second para."),
    ]


def test_a_heading_directly_above_its_paragraph_keeps_the_paragraph():
    # before: "# Hours\nOpen ..." was one heading block and the paragraph was dropped (a KB written so was empty)
    ps = chunk_document("lib", "# Hours\nOpen 9 to 5 on weekdays.\n\n# Fees\nA late book costs 25 cents a day.\n")
    assert [(p.id, p.text) for p in ps] == [("lib#1", "Open 9 to 5 on weekdays."),
                                            ("lib#2", "A late book costs 25 cents a day.")]


def test_a_file_without_blank_lines_gives_one_passage_per_heading():
    text = "# Hours\nOpen 9 to 5 on weekdays.\nClosed on Sunday.\n# Fees\nA late book costs 25 cents a day.\n"
    assert [p.text for p in chunk_document("lib", text)] == ["Open 9 to 5 on weekdays. Closed on Sunday.",
                                                            "A late book costs 25 cents a day."]


def test_folder_in_name_order(small_kb):
    ps = chunk_folder(small_kb)
    assert [p.id for p in ps] == ["kb-billing#1", "kb-hours#1", "kb-labs#1", "kb-refills#1", "kb-refills#2"]
    assert set(load_kb(small_kb)) == {"kb-billing", "kb-hours", "kb-labs", "kb-refills"}


def test_bad_folders(tmp_path):
    with pytest.raises(InputError, match="not found"):
        chunk_folder(tmp_path / "missing")
    with pytest.raises(InputError, match="no .md files"):
        chunk_folder(tmp_path)
    (tmp_path / "kb-a.md").write_text("# Only a heading\n")
    with pytest.raises(InputError, match="no passages"):
        chunk_folder(tmp_path)
