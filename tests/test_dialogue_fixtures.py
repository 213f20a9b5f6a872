"""The committed multi-turn dialogue fixtures (fixtures/dialogues/, issue 13): well-formed, facts from the KB,
no_antecedent turns unanswerable, and queries.jsonl = dialogues.jsonl + the recogniser's transcripts."""
import json
import re
from collections import Counter, defaultdict

import pytest

from rag.retrieval.chunk import load_kb
from rag.voice.verify import split_sentences

from conftest import ROOT

DIR = ROOT / "fixtures" / "dialogues"
KB_DIRS = {"clinic": ROOT / "fixtures" / "voice" / "kb", "vet": ROOT / "fixtures" / "transfer" / "kb",
           "dental": ROOT / "fixtures" / "dental" / "kb", "salon": ROOT / "fixtures" / "salon" / "kb"}
KINDS = {"first", "opener", "pronoun", "ellipsis", "switch", "no_antecedent"}
FIELDS = ["dialogue", "kb", "turn", "id", "spoken", "standalone", "kind", "relevant", "answerable", "facts"]
MIN_PER_KB = {"opener": 3, "pronoun": 3, "ellipsis": 3, "switch": 2, "no_antecedent": 2}


def _rows(name):
    return [json.loads(line) for line in (DIR / name).read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def rows():
    return _rows("dialogues.jsonl")


@pytest.fixture(scope="module")
def dialogues(rows):
    out = defaultdict(list)
    for r in rows:
        out[r["dialogue"]].append(r)
    return out


def test_fields_ids_and_turns(rows, dialogues):
    assert all(list(r) == FIELDS for r in rows)
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids))
    seen = []  # each dialogue's turns are contiguous in the file and numbered 1..n
    for r in rows:
        if not seen or seen[-1] != r["dialogue"]:
            assert r["dialogue"] not in seen, f"{r['id']}: dialogue {r['dialogue']} split in the file"
            seen.append(r["dialogue"])
    for d, turns in dialogues.items():
        assert [t["turn"] for t in turns] == list(range(1, len(turns) + 1)), d
        assert all(t["id"] == f"{d}.{t['turn']}" for t in turns)
        assert len({t["kb"] for t in turns}) == 1 and turns[0]["kb"] in KB_DIRS, d
        assert turns[0]["kind"] in ("first", "no_antecedent"), d


def test_sizes_and_kind_coverage(rows, dialogues):
    assert len(dialogues) >= 24 and len(rows) >= 72
    per_kb = Counter(ts[0]["kb"] for ts in dialogues.values())
    assert all(per_kb[kb] >= 12 for kb in KB_DIRS), per_kb
    assert {r["kind"] for r in rows} <= KINDS
    kinds = Counter((r["kb"], r["kind"]) for r in rows)
    for kb in KB_DIRS:
        for kind, least in MIN_PER_KB.items():
            assert kinds[kb, kind] >= least, (kb, kind, kinds[kb, kind])
        # follow-ups the KB cannot answer (not only turns without an antecedent)
        assert sum(1 for r in rows if r["kb"] == kb and not r["answerable"]
                   and r["kind"] in ("opener", "pronoun", "ellipsis")) >= 2


def test_facts_are_verbatim_in_a_relevant_sentence(rows):
    kbs = {kb: load_kb(folder) for kb, folder in KB_DIRS.items()}
    for r in rows:
        assert isinstance(r["answerable"], bool)
        assert r["answerable"] == bool(r["relevant"]) == bool(r["facts"]), r["id"]
        for doc in r["relevant"]:
            assert doc in kbs[r["kb"]], f"{r['id']}: no document {doc} in the {r['kb']} KB"
        sentences = [s.lower() for doc in r["relevant"] for s in split_sentences(kbs[r["kb"]][doc])]
        for fact in r["facts"]:
            assert any(fact.lower() in s for s in sentences), f"{r['id']}: {fact!r} in no sentence of {r['relevant']}"


def test_standalone_and_no_antecedent_turns(dialogues):
    for turns in dialogues.values():
        for i, t in enumerate(turns):
            assert t["spoken"].strip() and t["standalone"].strip()
            if t["kind"] in ("first", "switch", "no_antecedent"):  # nothing to resolve: the same words
                assert t["standalone"] == t["spoken"], t["id"]
            else:                                                  # a follow-up: standalone spells the topic out
                assert t["standalone"] != t["spoken"] and i > 0, t["id"]
            if t["kind"] == "no_antecedent":
                assert not t["answerable"] and t["relevant"] == [] and t["facts"] == [], t["id"]
                # first in its dialogue, or after turns that gave nothing to lean on
                assert all(not e["answerable"] and e["kind"] in ("first", "no_antecedent") for e in turns[:i]), t["id"]
            if t["kind"] == "switch":
                assert any(e["answerable"] for e in turns[:i]), t["id"]  # a switch leaves an established topic


def test_queries_are_the_dialogues_plus_transcripts(rows):
    queries = _rows("queries.jsonl")
    assert len(queries) == len(rows)
    for q, r in zip(queries, rows):
        assert {k: v for k, v in q.items() if k not in ("asr", "standalone_asr")} == r
        keys = list(q)
        assert keys[keys.index("spoken") + 1] == "asr" and keys[keys.index("standalone") + 1] == "standalone_asr"
        for k in ("asr", "standalone_asr"):
            assert re.fullmatch(r"[A-Z0-9' ]*", q[k]), (q["id"], k, q[k])
        if q["standalone"] == q["spoken"]:
            assert q["standalone_asr"] == q["asr"], q["id"]
    heard = defaultdict(set)  # one text, one transcript (the chain is deterministic)
    for q in queries:
        heard[q["spoken"]].add(q["asr"])
        heard[q["standalone"]].add(q["standalone_asr"])
    assert all(len(v) == 1 for v in heard.values())
