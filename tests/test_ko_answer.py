"""Korean grounded answers: citation validity, abstention, verifier, fallback and metrics on hand-made
cases; the schema-bound call against a stub server (no model)."""
import json

import pytest

from llm_stub import Stub
from rag.ko.answer import (ABSTAIN, KoSettings, ShareSupport, ask_ko, build_ko_messages, citations_valid, decide_ko,
                           extractive_ko, focus, hallucinated, headed, is_abstention, key_terms, parse_raw, score_rows,
                           span_match, verify_ko)
from rag.llm.client import cited_schema, validate_cited
from rag.bench.squad import answer_texts

P = ["서울은 대한민국의 수도이다. 인구는 약 950만 명이다.", "부산은 항구 도시이다."]
Q = "대한민국의 수도는 어디인가?"


@pytest.mark.parametrize("answer, cits, ok", [
    ("서울", ["1"], True),
    ("서울", ["1", "2"], True),
    ("서울", ["3"], False),          # only 2 documents were given
    ("서울", ["1", "1"], False),     # repeated
    ("서울", ["none"], False),       # an answer must cite a document
    ("서울", ["1", "none"], False),
    ("서울", [], False),
    (ABSTAIN, ["none"], True),
    (ABSTAIN + ".", ["none"], True),
    (ABSTAIN, ["1"], False),         # an abstention cites nothing
])
def test_citation_validity(answer, cits, ok):
    assert citations_valid(answer, cits, 2) is ok


def test_key_terms_are_kiwi_content_morphemes():
    assert key_terms("서울은 대한민국의 수도이다.") == {"서울", "대한민국", "수도"}
    assert key_terms("네") == set()


@pytest.mark.parametrize("answer, cits, expected", [
    ("서울", ["1"], (True, "supported")),
    ("서울", ["2"], (False, "terms_not_in_cited")),      # 서울 is in document 1, not 2
    ("부산 항구", ["1", "2"], (True, "supported")),
    ("인천", ["1"], (False, "terms_not_in_cited")),
    ("네", ["1"], (False, "no_key_terms")),
    ("서울", ["4"], (False, "invalid_citation")),
    (ABSTAIN, ["none"], (True, "abstained")),
    (ABSTAIN, ["1"], (False, "invalid_citation")),
])
def test_verifier(answer, cits, expected):
    assert verify_ko(answer, cits, P) == expected


def test_extractive_picks_the_sentence_with_most_question_morphemes():
    # 대한민국 + 수도 (2 shared) beat 0 shared elsewhere
    assert extractive_ko(Q, P) == ("서울은 대한민국의 수도이다.", "1")
    assert extractive_ko("이순신이 태어난 해는?", P) is None          # shares no morpheme
    # 대한민국, 수도, 인구: the first sentence holds 2 of 3 (0.67), the second 1
    assert extractive_ko("대한민국 수도의 인구는?", P) == ("서울은 대한민국의 수도이다.", "1")
    assert extractive_ko("대한민국 수도의 인구는?", P, support=ShareSupport(0.7)) is None


def test_focus_keeps_the_sentences_sharing_most_question_morphemes():
    t = "서울은 대한민국의 수도이다. 부산은 항구 도시이다. 한라산은 제주도에 있다."  # sentences of 15, 12, 13 chars
    assert focus("제주도에 있는 산은?", t, 100) == t                      # fits: whole passage
    # 한라산 (shares 제주도) first: 13; then 서울 (ties at 0, earlier first): 13+1+15 = 29; 부산 would make 42 > 40
    assert focus("제주도에 있는 산은?", t, 40) == "서울은 대한민국의 수도이다. 한라산은 제주도에 있다."
    assert focus("제주도에 있는 산은?", t, 10) == "한라산은 제주도에…"          # best sentence cut, marked
    # a bad-input pass (2026-12-03): the cut fragment was said, and a cut can drop the negation at the end
    long = "일요일에 내과 진료는 물론 소아과와 피부과 진료도 " + "모두 " * 20 + "하지 않습니다."
    assert extractive_ko("일요일에 내과 진료를 하나요?", [focus("일요일에 내과 진료를 하나요?", long, 40)]) is None
    assert extractive_ko("일요일에 내과 진료를 하나요?", [long]) == (long, "1")


def test_decide_says_verified_answers_and_replaces_failed_ones():
    assert decide_ko(Q, "서울", ["1"], P) == {"say": "서울", "citations": ["1"], "status": "llm",
                                               "reason": "supported"}
    assert decide_ko(Q, ABSTAIN, ["none"], P)["status"] == "abstained"
    wrong = decide_ko(Q, "인천", ["1"], P)
    assert wrong == {"say": "서울은 대한민국의 수도이다.", "citations": ["1"], "status": "extractive",
                     "reason": "terms_not_in_cited"}
    failed = decide_ko("이순신이 태어난 해는?", None, None, P, error="timeout")
    assert failed == {"say": ABSTAIN, "citations": ["none"], "status": "fallback_abstained",
                      "reason": "llm_timeout"}


def test_hallucination_rule():
    assert hallucinated("서울", ["1"], P, gold_excluded=True)           # answered without the gold passage
    assert not hallucinated(ABSTAIN, ["none"], P, gold_excluded=True)
    assert not hallucinated("서울", ["1"], P, gold_excluded=False)
    assert hallucinated("서울", ["2"], P, gold_excluded=False)          # key term not in the cited passage
    assert hallucinated("서울", ["none"], P, gold_excluded=False)       # nothing valid cited
    assert not hallucinated(None, None, P, gold_excluded=True)          # no output is not an answer


def test_span_match_ignores_spacing_and_abstention():
    assert span_match("서울특별시입니다", ["서울 특별시"])
    assert not span_match("부산", ["서울"])
    assert not span_match(ABSTAIN, [ABSTAIN])
    assert not span_match(None, ["서울"])


def test_abstention_sentence():
    assert is_abstention(" 제공된 문서에서 찾을 수 없습니다. ")
    assert not is_abstention("서울")
    assert not is_abstention(None)


def row(raw_answer, raw_cits, excluded, error=None):
    final = decide_ko(Q, None if error else raw_answer, None if error else raw_cits, P, error)
    return {"k": 2, "gold_excluded": excluded, "golds": ["서울"], "passages": P, "raw_answer": raw_answer,
            "raw_citations": raw_cits, "error": error, "final": final}


def test_score_rows_by_hand():
    rows = [row("서울", ["1"], False),                     # correct, cited, span match
            row("인천", ["1"], False),                     # hallucinated; fallback says the 서울 sentence
            row(ABSTAIN, ["none"], False),                 # over-abstention
            row(None, None, False, error="timeout")]       # no output; fallback sentence
    m = score_rows(rows)
    raw, final = m["raw"], m["final"]
    assert m["n"] == 4
    assert (raw["answered"], raw["abstained"], raw["no_output"]) == (2, 1, 1)
    assert raw["citation_valid"] == 3 and raw["citation_validity"] == 0.75
    assert raw["hallucinated"] == 1 and raw["hallucination_rate"] == 0.25
    assert raw["span_match"] == 1 and raw["span_match_answered"] == 0.5
    assert raw["abstention_rate"] == 0.25
    # final: 서울 (llm), extractive 서울 sentence, the model's abstention, extractive 서울 sentence
    assert (final["answered"], final["abstained"]) == (3, 1)
    assert final["hallucinated"] == 0 and final["span_match"] == 3 and final["citation_validity"] == 1.0
    assert m["final_status"] == {"llm": 1, "extractive": 2, "abstained": 1}
    assert m["llm_errors"] == {"timeout": 1}
    lo, hi = final["span_match_ci"]                # 3 of 4: resamples' means run from 0.25 to 1.0
    assert lo < 0.75 < hi == 1.0 and lo >= 0.25
    assert final["hallucination_ci"] == [0.0, 0.0] and raw["abstention_ci"][0] < 0.25 < raw["abstention_ci"][1]


def test_gold_excluded_scores_answers_as_hallucinations_and_empty_cells_are_zero():
    m = score_rows([row("서울", ["1"], True), row(ABSTAIN, ["none"], True)])
    assert m["raw"]["hallucination_rate"] == 0.5 and m["raw"]["abstention_rate"] == 0.5
    empty = score_rows([])
    assert empty["raw"]["abstention_rate"] == 0.0 and empty["final"]["span_match_answered"] == 0.0


def test_parse_raw_is_lenient():
    assert parse_raw('{"answer": "서울", "citations": ["7"]}') == ("서울", ["7"])
    assert parse_raw('{"answer": "서울"') == (None, None)
    assert parse_raw('{"answer": "서울", "citations": "1"}') == ("서울", None)


def test_cited_schema_and_validation():
    schema = cited_schema(["1", "2"], 10)
    c = schema["properties"]["citations"]
    assert c["items"]["enum"] == ["1", "2", "none"] and c["minItems"] == 1 and c["maxItems"] == 3
    assert validate_cited('{"answer": "서울", "citations": ["1"]}', schema) == ("서울", ["1"], None, "")
    assert validate_cited('{"answer": "서울", "citations": ["3"]}', schema)[2] == "citation_not_in_enum"
    assert validate_cited('{"answer": "서울", "citations": []}', schema)[2] == "schema_violation"
    assert validate_cited('{"answer": "서울", "source": "1"}', schema)[2] == "schema_violation"
    assert validate_cited('{"answer": "' + "가" * 11 + '", "citations": ["1"]}', schema)[2] == "schema_violation"


def test_prompts_number_documents_and_fewshot_adds_two_examples():
    a = build_ko_messages(Q, P, "A_baseline")
    b = build_ko_messages(Q, P, "B_fewshot")
    assert len(a) == 2 and len(b) == 6
    assert a[-1]["content"] == f"[문서 1] {P[0]}\n[문서 2] {P[1]}\n\n질문: {Q}"
    assert ABSTAIN in b[4]["content"]                      # the second example abstains
    with pytest.raises(ValueError):
        build_ko_messages(Q, P, "C")


def test_call_through_stub_server():
    with Stub(json.dumps({"answer": "서울", "citations": ["1"]}, ensure_ascii=False)) as stub:
        reply = ask_ko(stub.url, Q, P, KoSettings(prompt="A_baseline", timeout_s=5))
    assert (reply.answer, reply.citations, reply.error, reply.source) == ("서울", ["1"], None, None)
    sent = stub.requests[0]
    assert sent["response_format"]["json_schema"]["schema"]["properties"]["citations"]["items"]["enum"] == \
        ["1", "2", "none"]
    assert sent["temperature"] == 0.0 and sent["messages"][-1]["content"].startswith("[문서 1] 서울은")
    assert sent["logprobs"] is True            # every Korean call asks for them: the answer gate reads them
    with Stub(json.dumps({"answer": "서울", "citations": ["5"]})) as stub:   # schema ignored by the server
        reply = ask_ko(stub.url, Q, P, KoSettings(timeout_s=5))
    assert reply.error == "citation_not_in_enum" and reply.answer is None and reply.citations is None
    assert parse_raw(reply.raw) == ("서울", ["5"])                            # raw kept for scoring
    assert decide_ko(Q, None, None, P, reply.error)["status"] == "extractive"


def test_answer_texts_from_squad_json():
    doc = {"data": [{"title": "t", "paragraphs": [{"context": "c", "qas": [
        {"id": "q1", "question": "?", "answers": [{"text": "서울", "answer_start": 0},
                                                   {"text": "서울", "answer_start": 0},
                                                   {"text": "서울시", "answer_start": 0}]},
        {"id": "q2", "question": "?", "answers": []}]}]}]}
    assert answer_texts(doc) == {"q1": ["서울", "서울시"], "q2": []}


def ko_params(tmp_path):
    """params.yaml with ``ko`` outputs redirected to ``tmp_path``, and ko_prepare run on it (0.3 s),
    so the test needs no earlier `dvc repro`."""
    import subprocess
    import sys

    from conftest import ROOT, write_params
    from rag.io import read_params

    from conftest import public_data

    p = read_params(ROOT / "params.yaml")
    squad = ROOT / p["ko"]["squad_path"]          # fetched by stage fetch_data, else the verbatim copy it comes from
    p["ko"]["squad_path"] = str(public_data(str(squad.relative_to(ROOT / p["data"]["dest_dir"]))))
    p["ko"]["data_dir"] = str(tmp_path / "ko")
    p["ko"]["metrics_dir"] = str(tmp_path / "ko_metrics")
    path = write_params(tmp_path / "params.yaml", p)
    done = subprocess.run([sys.executable, str(ROOT / "stages" / "ko_prepare.py"), "--params", str(path)],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, f"stages/ko_prepare.py failed:\n{done.stderr[-2000:]}"
    return path, p


def test_cli_ask_korean_with_stub(tmp_path, capsys):

    from rag.__main__ import main

    path, p = ko_params(tmp_path)
    with Stub(json.dumps({"answer": ABSTAIN, "citations": ["none"]}, ensure_ascii=False)) as stub:
        assert main(["ask", "임종석이 지명수배 된 날은?", "--params", str(path), "--llm-url", stub.url]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"답변: {ABSTAIN}\n인용: none\n상태: abstained")
    assert out.count("\n[문서 ") == p["ko_gen"]["cli_top_k"]
    assert "[문서 1] 0_0 " in out        # KorQuAD dev paragraph 0_0 is this question's gold passage
    messages = stub.requests[0]["messages"]
    assert len(messages) == 6 and messages[-1]["content"].endswith("질문: 임종석이 지명수배 된 날은?")


def test_cli_compare_prints_tables(capsys, monkeypatch):
    from conftest import ROOT

    from rag.__main__ import main

    monkeypatch.chdir(ROOT)
    assert main(["compare"]) == 0
    assert "== metrics/ko/retrieval.md\nKorQuAD 1.0 dev" in capsys.readouterr().out


def test_cli_ask_voice_track_gates_and_verifies(capsys, monkeypatch):
    from conftest import ROOT

    from rag.__main__ import main

    monkeypatch.chdir(ROOT)
    reply = json.dumps({"answer": "On Saturday we are open from 9 a.m. to 1 p.m.", "source": "kb-hours"})
    with Stub(reply) as stub:
        assert main(["ask", "what time do you open on saturday", "--llm-url", stub.url]) == 0
        assert main(["ask", "who won the football game last night", "--track", "voice", "--llm-url", stub.url]) == 0
    out = capsys.readouterr().out
    assert "answer: On Saturday we are open from 9 a.m. to 1 p.m.\nsource: kb-hours\nstatus: llm (verified)" in out
    assert "source: none\nstatus: refused (below_tau)" in out
    assert len(stub.requests) == 1            # the refused question never reached the model


def test_a_passage_sentence_is_led_by_its_heading():
    assert headed("서울 지점", "영업시간은 10시부터입니다.  주차는 무료입니다.") == (
        "서울 지점: 영업시간은 10시부터입니다. 서울 지점: 주차는 무료입니다.")
    assert headed("주차:", "주차는 무료입니다.") == "주차는 무료입니다."   # already led by it
    assert headed("", "주차는  무료입니다.") == "주차는 무료입니다."


def test_the_extractive_pick_counts_a_term_kiwi_reads_inside_a_compound():
    # "영업 시간" in the question is two morphemes, "영업시간은" in a sentence one: counted by morphemes alone, the
    # parking sentence tied with the hours one (one shared term each) and, first, was the pick (KorQuAD train, 1,000
    # questions: said sentence holds a gold span 0.697 -> 0.707)
    passages = ["서울 지점: 주차는 무료입니다.", "서울 지점: 영업시간은 오전 10시부터 오후 8시까지입니다."]
    assert extractive_ko("서울 지점 영업 시간은 언제인가요?", passages) == (passages[1], "2")


def test_answer_token_logprobs_reads_the_answer_string_only():
    from rag.ko.answer import answer_token_logprobs

    # Qwen's tokens as llama.cpp streams them (a code fence before the JSON is reported, then stripped)
    tokens = [("```", -0.74), ("{\n", -0.04), (' "', 0.0), ("answer", 0.0), ('":', 0.0), (' "', 0.0), ("서", -0.008),
              ("울", -0.001), ('",\n', -0.011), (' "', 0.0), ("citations", 0.0), ('":', 0.0), (' ["', -0.03),
              ("1", -0.032), ('"]}', -0.07)]
    assert answer_token_logprobs(tokens) == [-0.008, -0.001]
    assert answer_token_logprobs([('{"answer": "a\\"b', -1.0), ('c", ', -2.0), ('"citations": ["1"]}', -3.0)]) == \
        [-1.0, -2.0]                                                   # an escaped quote does not end the string
    assert answer_token_logprobs([('{"answer": ""}', -1.0)]) == []    # an empty answer has no tokens
    assert answer_token_logprobs([('{"citations": ["1"]}', -1.0)]) == [] and answer_token_logprobs(None) == []


def test_the_answer_gate_replaces_an_unconfident_answer_and_can_set_its_own_support():
    from rag.ko.answer import AnswerGate

    app = "멜론은 음원 서비스이다. 이 쇼케이스는 유튜브를 통해 최초로 공개되었다."
    showcase = "쇼케이스가 최초로 공개된 사이트는?"   # the 유튜브 sentence holds 3 of its 4 terms (0.75)
    strict = ShareSupport(0.8)                       # the verifier alone refuses 유튜브 at 0.8; no sentence passes
    assert decide_ko(showcase, "유튜브", ["1"], [app], support=strict)["status"] == "fallback_abstained"
    gate = AnswerGate(min_support=0.0, min_mean_logprob=-0.1)
    d = decide_ko(showcase, "유튜브", ["1"], [app], support=strict, gate=gate, answer_logprobs=[-0.02, -0.1])
    assert (d["say"], d["status"], d["reason"]) == ("유튜브", "llm", "supported")            # mean -0.06
    d = decide_ko(showcase, "유튜브", ["1"], [app], support=strict, gate=gate, answer_logprobs=[-0.02, -0.3])
    assert (d["status"], d["reason"]) == ("fallback_abstained", "low_confidence")            # mean -0.16
    assert decide_ko(showcase, "유튜브", ["1"], [app], gate=gate)["reason"] == "no_logprobs"
    d = decide_ko(showcase, "멜론", ["1"], [app], gate=gate, answer_logprobs=[0.0])  # confident, still not grounded
    assert (d["status"], d["reason"]) == ("extractive", "not_with_question_terms")
    assert decide_ko(Q, ABSTAIN, ["none"], P, gate=gate)["status"] == "abstained"  # an abstention needs no confidence
    assert decide_ko(Q, "서울", ["1"], P, gate=AnswerGate(), answer_logprobs=[-9.0])["status"] == "llm"  # no gate


def test_the_gate_applies_to_the_model_it_was_chosen_for_only():
    from rag.ko.answer import AnswerGate

    g = {"answer_gate": {"model": "qwen2.5-coder-1.5b", "min_support": 0.0, "min_mean_logprob": -0.0259}}
    assert AnswerGate.from_params(g, {"url": "", "local_model": "qwen2.5-coder-1.5b"}) == AnswerGate(0.0, -0.0259)
    assert AnswerGate.from_params(g, {"url": "", "local_model": "smollm2-135m-q8"}) == AnswerGate()
    assert AnswerGate.from_params(g, {"url": "http://127.0.0.1:1", "model": "remote-7b",
                                      "local_model": "qwen2.5-coder-1.5b"}) == AnswerGate()   # the server's model
    assert AnswerGate.from_params({}, {"url": "", "local_model": "qwen2.5-coder-1.5b"}) == AnswerGate()
    half = {"answer_gate": {"model": "m", "min_support": None, "min_mean_logprob": -0.5}}
    assert AnswerGate.from_params(half, {"url": "", "local_model": "m"}) == AnswerGate(None, -0.5)
    for bad in ({"model": "m", "min_logprob": -1}, {"model": "m", "min_mean_logprob": 0.5},
                {"model": "m", "min_support": 2}, {"model": "m", "min_support": "high"}, [0.1]):
        with pytest.raises(ValueError, match="ko_gen.answer_gate"):
            AnswerGate.from_params({"answer_gate": bad}, {"url": "", "local_model": "m"})
