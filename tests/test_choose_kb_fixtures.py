"""The choose KBs written for answer selection (issue 10): Harbor Dental (fixtures/dental/) and Riverside Hair Studio
(fixtures/salon/). Well-formed questions whose facts are verbatim in a sentence of their gold document, near misses
naming a real document, and the recogniser files equal to the question files plus ``asr``."""
import json

import pytest

from rag.retrieval.chunk import load_kb
from rag.voice.verify import split_sentences

from conftest import ROOT

FIELDS = ["id", "spoken", "context", "relevant", "answerable", "facts"]
# KB folder -> (question id prefix, questions, answerable, near-miss prefix, near misses)
KBS = {"dental": ("d", 33, 27, "x", 30), "salon": ("s", 33, 28, "y", 25)}


def _rows(kb_name, name):
    path = ROOT / "fixtures" / kb_name / name
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module", params=sorted(KBS))
def kb(request):
    return request.param, load_kb(ROOT / "fixtures" / request.param / "kb")


def test_questions_are_well_formed_and_their_facts_are_in_one_gold_sentence(kb):
    name, kb = kb
    prefix, n, answerable = KBS[name][:3]
    rows = _rows(name, "questions.jsonl")
    assert [r["id"] for r in rows] == [f"{prefix}{i:02d}" for i in range(1, n + 1)]
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
    assert sum(r["answerable"] for r in rows) == answerable


def test_near_misses_are_unanswerable_and_name_a_kb_document(kb):
    name, kb = kb
    prefix, n = KBS[name][3:]
    rows = _rows(name, "near_miss.jsonl")
    assert [r["id"] for r in rows] == [f"{prefix}{i:02d}" for i in range(1, n + 1)]
    questions = {r["spoken"].lower() for r in _rows(name, "questions.jsonl")}
    for r in rows:
        assert list(r) == [*FIELDS, "swap", "near"], r["id"]
        assert not r["answerable"] and r["relevant"] == [] and r["facts"] == [] and r["context"] is None, r["id"]
        assert r["near"] in kb and r["swap"], r["id"]
        assert r["spoken"].lower() not in questions, r["id"]


@pytest.mark.parametrize("kb_name", sorted(KBS))
@pytest.mark.parametrize("source, heard", [("questions.jsonl", "queries.jsonl"),
                                           ("near_miss.jsonl", "near_miss_queries.jsonl")])
def test_recogniser_files_are_the_questions_plus_what_was_heard(kb_name, source, heard):
    said, got = _rows(kb_name, source), _rows(kb_name, heard)
    assert [{k: v for k, v in r.items() if k != "asr"} for r in got] == said
    assert all(r["asr"] and r["asr"] == r["asr"].upper() for r in got)
    assert sum(r["asr"] != r["spoken"].upper().rstrip("?") for r in got) >= len(got) // 2  # really recognised
