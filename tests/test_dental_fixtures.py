"""The second choose KB, Harbor Dental (fixtures/dental/, issue 10): well-formed questions whose facts are
verbatim in a sentence of their gold document, near misses naming a real document, and the recogniser files equal
to the question files plus ``asr``."""
import json

import pytest

from rag.retrieval.chunk import load_kb
from rag.voice.verify import split_sentences

from conftest import ROOT

DIR = ROOT / "fixtures" / "dental"
FIELDS = ["id", "spoken", "context", "relevant", "answerable", "facts"]


def _rows(name):
    return [json.loads(line) for line in (DIR / name).read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def kb():
    return load_kb(DIR / "kb")


def test_questions_are_well_formed_and_their_facts_are_in_one_gold_sentence(kb):
    rows = _rows("questions.jsonl")
    assert [r["id"] for r in rows] == [f"d{i:02d}" for i in range(1, 34)]
    seen = set()
    for r in rows:
        assert list(r) == FIELDS, r["id"]
        assert r["context"] is None or r["context"] in seen, r["id"]
        seen.add(r["id"])
        if not r["answerable"]:
            assert r["relevant"] == [] and r["facts"] == [], r["id"]
            continue
        (doc,) = r["relevant"]
        sentences = [s.lower() for s in split_sentences(kb[doc])]
        assert any(all(f.lower() in s for f in r["facts"]) for s in sentences), (r["id"], r["facts"])
    assert sum(r["answerable"] for r in rows) == 27


def test_near_misses_are_unanswerable_and_name_a_kb_document(kb):
    rows = _rows("near_miss.jsonl")
    assert [r["id"] for r in rows] == [f"x{i:02d}" for i in range(1, 31)]
    questions = {r["spoken"].lower() for r in _rows("questions.jsonl")}
    for r in rows:
        assert list(r) == [*FIELDS, "swap", "near"], r["id"]
        assert not r["answerable"] and r["relevant"] == [] and r["facts"] == [] and r["context"] is None, r["id"]
        assert r["near"] in kb and r["swap"], r["id"]
        assert r["spoken"].lower() not in questions, r["id"]


@pytest.mark.parametrize("source, heard", [("questions.jsonl", "queries.jsonl"),
                                           ("near_miss.jsonl", "near_miss_queries.jsonl")])
def test_recogniser_files_are_the_questions_plus_what_was_heard(source, heard):
    said, got = _rows(source), _rows(heard)
    assert [{k: v for k, v in r.items() if k != "asr"} for r in got] == said
    assert all(r["asr"] and r["asr"] == r["asr"].upper() for r in got)
    assert sum(r["asr"] != r["spoken"].upper().rstrip("?") for r in got) >= len(got) // 2  # really recognised
