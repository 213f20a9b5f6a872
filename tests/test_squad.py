"""SQuAD JSON -> BEIR conversion, duplicate passages, split by article (no leakage), qrels."""
import json

import pytest

from rag.io import InputError
from rag.bench.squad import load_squad, parse_squad, passage_text, split_articles, split_queries



def qa(qid, question):
    return {"id": qid, "question": question, "answers": [{"text": "x", "answer_start": 0}]}


TOY = {
    "version": "toy",
    "data": [
        {"title": "서울", "paragraphs": [
            {"context": "서울은 수도이다.", "qas": [qa("a", "수도는?"), qa("b", "서울은?")]},
            {"context": "한강이 흐른다.", "qas": [qa("c", "강은?")]},
            {"context": "서울은 수도이다.", "qas": [qa("d", "복사본 질문")]},  # duplicate of 0_0
        ]},
        {"title": "부산", "paragraphs": [
            {"context": "서울은 수도이다.", "qas": [qa("e", "다른 문서의 같은 문단")]},  # same text, other article
        ]},
    ],
}


def test_conversion_ids_titles_texts_and_qrels():
    ds = parse_squad(TOY, dedupe_passages=False)
    assert [p["_id"] for p in ds.passages] == ["0_0", "0_1", "0_2", "1_0"]
    assert ds.passages[1] == {"_id": "0_1", "title": "서울", "text": "한강이 흐른다.", "article": 0}
    assert [q["_id"] for q in ds.queries] == ["a", "b", "c", "d", "e"]
    assert ds.queries[2] == {"_id": "c", "text": "강은?", "article": 0, "passage": "0_1"}
    assert ds.qrels == {"a": {"0_0": 1}, "b": {"0_0": 1}, "c": {"0_1": 1}, "d": {"0_2": 1}, "e": {"1_0": 1}}
    assert ds.articles == ["서울", "부산"]
    assert ds.aliases == {}


def test_duplicate_passages_within_an_article_are_merged_into_the_first_copy():
    ds = parse_squad(TOY)
    assert [p["_id"] for p in ds.passages] == ["0_0", "0_1", "1_0"]  # 1_0: other article, kept apart
    assert ds.aliases == {"0_2": "0_0"}
    assert ds.qrels["d"] == {"0_0": 1}
    assert ds.queries[3]["passage"] == "0_2"  # where it was asked stays recorded


def test_passage_text_with_and_without_title():
    p = {"title": "서울", "text": "서울은 수도이다."}
    assert passage_text(p, True) == "서울\n서울은 수도이다."
    assert passage_text(p, False) == "서울은 수도이다."


def test_load_squad_errors_name_the_file(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(InputError, match="nope.json: file not found"):
        load_squad(missing)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(InputError, match=r"bad.json: invalid JSON at line 1"):
        load_squad(bad)
    no_question = tmp_path / "noq.json"
    no_question.write_text(json.dumps({"data": [{"title": "t", "paragraphs": [
        {"context": "c", "qas": [qa("a", "q"), {"id": "b"}]}]}]}), encoding="utf-8")
    with pytest.raises(InputError, match=r"noq.json: article 0 paragraph 0 question 1: missing field 'question'"):
        load_squad(no_question)
    dup = tmp_path / "dup.json"
    dup.write_text(json.dumps({"data": [{"title": "t", "paragraphs": [
        {"context": "c", "qas": [qa("a", "q1"), qa("a", "q2")]}]}]}), encoding="utf-8")
    with pytest.raises(InputError, match="dup.json: .*duplicate question id 'a'"):
        load_squad(dup)
    wrong_type = tmp_path / "type.json"
    wrong_type.write_text(json.dumps({"data": [{"title": 3, "paragraphs": []}]}), encoding="utf-8")
    with pytest.raises(InputError, match="type.json: article 0: field 'title' should be str, got int"):
        load_squad(wrong_type)


def test_load_squad_reads_a_file(tmp_path):
    f = tmp_path / "toy.json"
    f.write_text(json.dumps(TOY, ensure_ascii=False), encoding="utf-8")
    assert load_squad(f).qrels == parse_squad(TOY).qrels


def test_split_articles_sizes_disjoint_and_seeded():
    train, test = split_articles(10, 0.3, seed=1)
    assert len(test) == 3 and len(train) == 7
    assert set(train).isdisjoint(test)
    assert sorted(train + test) == list(range(10))
    assert train == sorted(train) and test == sorted(test)
    assert split_articles(10, 0.3, seed=1) == (train, test)
    # Any other seed gives some other split for most seeds; at least one of 5 must differ.
    assert any(split_articles(10, 0.3, seed=s)[1] != test for s in range(2, 7))


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1, 0.01, 0.99])
def test_split_articles_rejects_fractions_that_empty_a_side(fraction):
    with pytest.raises(ValueError):
        split_articles(10, fraction, seed=0)


def test_split_queries_follow_their_article_and_qrels_stay_on_the_same_side():
    ds = parse_squad(TOY)
    train_q, test_q = split_queries(ds.queries, test_articles=[1])
    assert [q["_id"] for q in train_q] == ["a", "b", "c", "d"]
    assert [q["_id"] for q in test_q] == ["e"]
    article_of = {p["_id"]: p["article"] for p in ds.passages}
    for q in test_q:
        assert all(article_of[pid] == 1 for pid in ds.qrels[q["_id"]])
    for q in train_q:
        assert all(article_of[pid] == 0 for pid in ds.qrels[q["_id"]])


def test_korquad_dev_conversion_and_split_have_no_leakage():
    from conftest import public_data

    ds = load_squad(public_data("korquad_v1_dev/KorQuAD_v1.0_dev.json"))
    assert len(ds.articles) == 140
    assert len(ds.passages) + len(ds.aliases) == 964
    assert ds.aliases == {"68_4": "68_3", "68_5": "68_3", "125_46": "125_36"}
    assert len(ds.queries) == 5774 == len(ds.qrels)
    pid_article = {p["_id"]: p["article"] for p in ds.passages}
    for q in ds.queries:  # every qrels passage is indexed and belongs to the query's article
        (pid,) = ds.qrels[q["_id"]]
        assert pid_article[pid] == q["article"]
    train_a, test_a = split_articles(len(ds.articles), 0.5, seed=13)
    train_q, test_q = split_queries(ds.queries, test_a)
    assert len(train_q) + len(test_q) == 5774
    train_pids = {pid for q in train_q for pid in ds.qrels[q["_id"]]}
    test_pids = {pid for q in test_q for pid in ds.qrels[q["_id"]]}
    assert train_pids.isdisjoint(test_pids)
    assert {q["article"] for q in train_q}.isdisjoint(q["article"] for q in test_q)
