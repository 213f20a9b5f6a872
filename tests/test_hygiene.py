"""Input hygiene at the door: byte-order marks, CRLF, Unicode forms, abbreviations, over-long paragraphs."""
import json
import unicodedata
import warnings

import numpy as np
import pytest

from rag.retrieval.chunk import chunk_document, chunk_folder, load_kb, token_count
from rag.retrieval.embed import MAX_TOKENS
from rag.io import normalise_text, read_jsonl
from rag.voice.queries import load_queries
from rag.voice.rewrite import rewrite
from rag.retrieval.search import PassageIndex
from rag.voice.verify import split_sentences

FILLER = " ".join(f"Our garden volunteer number {i} waters the ferns near the lobby window." for i in range(1, 41))
FACT = "The staff parking gate code is 4417."


@pytest.fixture
def messy_kb(tmp_path):
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "kb-hours.md").write_bytes(
        "\ufeff# Opening Hours\n\nWe are open from 9 a.m. to 1 p.m. on Saturday. We are closed on Sunday.\n".encode())
    (kb / "kb-labs.md").write_bytes(
        b"# Labs\r\n\r\nLab results are ready within 3 business days.\r\nA blood test costs $45.\r\n\r\n"
        b"Dr. Anna Patel reads every result.\r\n")
    nfd = unicodedata.normalize("NFD", "Our café serves crème brûlée.")
    (kb / "kb-vaccines.md").write_text(
        f"# Vaccines\n\nA ｆｌｕ ｓｈｏｔ costs $25 and needs no appointment.\n\n{nfd}\n", encoding="utf-8")
    (kb / "kb-long.md").write_text(f"# Garden\n\n{FILLER} {FACT}\n\nThe garden closes at dusk.\n", encoding="utf-8")
    (kb / "kb-billing.md").write_text("# Billing\n\nWe accept cash, debit and credit cards.\n", encoding="utf-8")
    return kb


def test_bom_crlf_and_forms_never_reach_a_passage(messy_kb):
    ps = chunk_folder(messy_kb)
    for p in ps:
        assert "\ufeff" not in p.text and "\r" not in p.text and "#" not in p.text
        assert unicodedata.is_normalized("NFKC", p.text)
    by_id = {p.id: p.text for p in ps}
    # the BOM file's first line is a heading, so its only passage is the paragraph
    assert [i for i in by_id if i.startswith("kb-hours")] == ["kb-hours#1"]
    assert by_id["kb-hours#1"] == "We are open from 9 a.m. to 1 p.m. on Saturday. We are closed on Sunday."
    assert by_id["kb-labs#1"] == "Lab results are ready within 3 business days. A blood test costs $45."
    assert by_id["kb-labs#2"] == "Dr. Anna Patel reads every result."
    assert by_id["kb-vaccines#1"] == "A flu shot costs $25 and needs no appointment."
    assert by_id["kb-vaccines#2"] == "Our café serves crème brûlée."  # composed again
    kb = load_kb(messy_kb)
    assert kb["kb-hours"].startswith("# Opening Hours\n")
    assert "\ufeff" not in "".join(kb.values())
    assert split_sentences(kb["kb-labs"]) == [
        "Lab results are ready within 3 business days.", "A blood test costs $45.",
        "Dr. Anna Patel reads every result."]
    # a BOM handed straight to the chunker or the splitter is dropped too
    assert [p.text for p in chunk_document("kb-x", "\ufeff# Opening Hours\n\nOpen daily.")] == ["Open daily."]
    assert split_sentences("\ufeff# Opening Hours\nOpen daily.") == ["Open daily."]


def test_normalise_text_rule():
    assert normalise_text("ｆｌｕ ｓｈｏｔ") == "flu shot"
    assert normalise_text(unicodedata.normalize("NFD", "café")) == "café"
    assert normalise_text("\ufeffhello") == "hello"
    # Hangul text is NFC: composed syllables and compatibility jamo unchanged (NFKC would turn "ㅋ" into U+110F)
    for ko in ("안녕하세요 ㅋㅋ", "서울특별시 ㎞ １２"):
        assert normalise_text(ko) == ko
    assert normalise_text(unicodedata.normalize("NFD", "한국어")) == "한국어"
    assert normalise_text("ㅋ") != unicodedata.normalize("NFKC", "ㅋ")


def test_full_width_query_finds_the_passage(messy_kb):
    ps = chunk_folder(messy_kb)
    index = PassageIndex(ps, np.zeros((len(ps), 384), dtype=np.float32))
    assert index.search("ｆｌｕ ｓｈｏｔ", k=1, mode="bm25")[0][0] == "kb-vaccines#1"
    assert rewrite("ＨＯＷ ＭＵＣＨ ＩＳ Ａ ＦＬＵ ＳＨＯＴ") == "how much is a flu shot"
    nfd_query = unicodedata.normalize("NFD", "crème brûlée")
    assert index.search(nfd_query, k=1, mode="bm25")[0][0] == "kb-vaccines#2"
    assert rewrite(nfd_query) == "crème brûlée"


def test_queries_file_with_bom_crlf_and_full_width(tmp_path):
    rows = [{"id": "q1", "asr": "ｆｌｕ ｓｈｏｔ price", "context": None, "relevant": ["kb-vaccines"],
             "answerable": True, "facts": ["＄25"]},
            {"id": "q2", "asr": "and on sunday", "context": "q1", "relevant": [], "answerable": False, "facts": []}]
    path = tmp_path / "queries.jsonl"
    path.write_bytes(("\ufeff" + "\r\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\r\n").encode())
    assert [r["id"] for r in read_jsonl(path)] == ["q1", "q2"]
    qs = load_queries(path)
    assert qs[0]["asr"] == "flu shot price" and qs[0]["facts"] == ["$25"]
    assert qs[1]["asr"] == "and on sunday"


def test_long_paragraph_is_split_not_truncated(messy_kb):
    assert token_count(f"{FILLER} {FACT}") > MAX_TOKENS
    ps = [p for p in chunk_folder(messy_kb) if p.doc == "kb-long"]
    long_parts = [p for p in ps if p.id.startswith("kb-long#1.")]
    assert len(long_parts) >= 2
    assert [p.id for p in long_parts] == [f"kb-long#1.{m}" for m in range(1, len(long_parts) + 1)]
    assert all(token_count(p.text) <= MAX_TOKENS for p in long_parts)
    assert long_parts[-1].text.endswith(FACT)
    assert " ".join(p.text for p in long_parts) == f"{FILLER} {FACT}"  # nothing dropped, nothing cut mid-sentence
    assert ps[-1].id == "kb-long#2" and ps[-1].text == "The garden closes at dusk."
    assert len({p.id for p in chunk_folder(messy_kb)}) == len(chunk_folder(messy_kb))


def test_over_long_sentence_kept_whole_with_a_warning(tmp_path):
    kb = tmp_path / "kb"
    kb.mkdir()
    sentence = "The ferns " + " ".join(["and the palms"] * 120) + " grow."
    (kb / "kb-ferns.md").write_text(f"# Ferns\n\nShort first.\n\n{sentence} Water them weekly.\n", encoding="utf-8")
    with pytest.warns(UserWarning, match=r"kb-ferns\.md: paragraph 2: a sentence of \d+ tokens"):
        ps = chunk_folder(kb)
    assert [p.id for p in ps] == ["kb-ferns#1", "kb-ferns#2.1", "kb-ferns#2.2"]
    assert ps[1].text == sentence and ps[2].text == "Water them weekly."
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        chunk_document("kb-x", "Short paragraph.\n\nAnother one.")  # no warning for short text


def test_abbreviations_do_not_end_sentences():
    text = ("Dr. Anna Patel is our dermatologist. Mr. Lee and Mrs. Kim work with Ms. Ortiz at St. Mary clinic. "
            "Bring ID, e.g. Passport or licence, i.e. Photo ID, etc. We are open from 9 a.m. to 1 p.m. on Saturday. "
            "We are closed on Sunday. Call us.")
    assert split_sentences(text) == [
        "Dr. Anna Patel is our dermatologist.",
        "Mr. Lee and Mrs. Kim work with Ms. Ortiz at St. Mary clinic.",
        "Bring ID, e.g. Passport or licence, i.e. Photo ID, etc. We are open from 9 a.m. to 1 p.m. on Saturday.",
        "We are closed on Sunday.",
        "Call us.",
    ]
    assert split_sentences("See (e.g. Dr. Lee) first. Then pay.") == ["See (e.g. Dr. Lee) first.", "Then pay."]
    assert split_sentences("We are closed. Él habla español.") == ["We are closed.", "Él habla español."]
    assert split_sentences("Dr. Lee is in.", abbreviations=()) == ["Dr.", "Lee is in."]


def test_a_nul_byte_is_an_input_error_naming_the_file(tmp_path):
    from rag.retrieval.chunk import chunk_folder, load_kb
    from rag.io import InputError

    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "bin.md").write_bytes(b"Hello\x00 world. Bye.\n")
    for read in (chunk_folder, load_kb):
        with pytest.raises(InputError, match="bin.md: not a text file"):
            read(kb)
