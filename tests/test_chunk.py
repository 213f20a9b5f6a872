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
