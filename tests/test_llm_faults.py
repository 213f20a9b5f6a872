"""Every LLM fault ends in an extractive or refused line with the cause in ``reason``."""
import json

import pytest

from llm_stub import Stub
from rag.voice.answer import AnswerSettings, answer_row, decide
from rag.retrieval.chunk import load_kb
from rag.retrieval.embed import query_embedder
from rag.llm.client import answer_schema, validate
from rag.llm.server import free_port
from rag.retrieval.search import PassageIndex
from rag.retrieval.sentences import SentenceIndex

QUERY = "what time do you open on saturday"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from conftest import ROOT

    kb = ROOT / "fixtures" / "voice" / "kb"
    return PassageIndex.from_folder(kb), load_kb(kb), query_embedder().embed_one(QUERY)


def said(setup, url, **settings):
    index, kb, vec = setup
    s = AnswerSettings(timeout_s=settings.pop("timeout_s", 5.0), **settings)
    row = answer_row("q1", QUERY, index, vec, 0.9, s, kb, url)
    return row, decide(row, kb, vec, s)


def reply(answer, source):
    return json.dumps({"answer": answer, "source": source})


def test_verified_answer_is_said(setup):
    with Stub(reply("On Saturday we are open from 9 a.m. to 1 p.m.", "kb-hours")) as stub:
        row, final = said(setup, stub.url)
    assert final["status"] == "llm" and final["say"].startswith("On Saturday")
    schema = stub.requests[0]["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["source"]["enum"] == row["retrieved"] + ["none"]
    assert stub.requests[0]["temperature"] == 0.0 and stub.requests[0]["stream"] is True


@pytest.mark.parametrize("stub_kwargs, error", [
    (dict(status=500), "http_error"),
    (dict(content='{"answer": "We open at 9 a.m.", "sour'), "invalid_json"),
    (dict(content='{"answer": "We open at 9 a.m. and we', finish_reason="length"), "truncated"),
    (dict(content="Sure! We open at 9 a.m. on Saturday."), "invalid_json"),  # schema ignored
    (dict(content='{"text": "We open at 9 a.m."}'), "schema_violation"),    # schema ignored, valid JSON
    (dict(content=reply("We open at 9 a.m.", "kb-pizza")), "source_not_in_enum"),
    (dict(content=reply("We open at 9 a.m.", "kb-hours"), delay_s=2.0), "timeout"),
    (dict(events=["[1, 2]"]), "bad_stream"),
    (dict(events=['{"choices": [null]}']), "bad_stream"),
    (dict(events=['{"choices": [{"delta": {"content": 7}}]}']), "bad_stream"),
    (dict(events=["Sure! We open at 9 a.m."]), "bad_stream"),                  # a data line that is not JSON
    (dict(events=["[" * 200_000 + "]" * 200_000]), "bad_stream"),            # nested past Python's recursion limit
    (dict(content='{"answer": ' + "[" * 3_000 + "]" * 3_000 + ', "source": "kb-hours"}'), "invalid_json"),
    (dict(body=b"Sure! We open at 9 a.m. on Saturday."), "bad_stream"),        # HTTP 200, but no event stream
])
def test_faults_fall_back(setup, stub_kwargs, error):
    with Stub(**stub_kwargs) as stub:
        row, final = said(setup, stub.url, timeout_s=1.0)
    assert row["error"] == error and row["answer"] is None
    assert final["status"] == "extractive"
    assert final["reason"] == f"llm_{error}"
    assert final["say"] == "On Saturday we are open from 9 a.m. to 1 p.m."  # the slot-matching sentence


def test_unreachable_server(setup):
    row, final = said(setup, f"http://127.0.0.1:{free_port()}")
    assert row["error"] == "unreachable"
    assert (final["status"], final["reason"]) == ("extractive", "llm_unreachable")


def test_wrong_day_answer_is_replaced(setup):
    with Stub(reply("We are open from 8:30 a.m. to 6 p.m.", "kb-hours")) as stub:
        _, final = said(setup, stub.url)
    assert (final["status"], final["reason"]) == ("extractive", "wrong_day")
    assert "9 a.m." in final["say"]


def test_gated_question_never_calls_the_model(setup):
    index, kb, vec = setup
    with Stub(reply("x", "none")) as stub:
        s = AnswerSettings(tau=0.95)
        row = answer_row("q1", QUERY, index, vec, 0.5, s, kb, stub.url)
    assert stub.requests == [] and row["gated"]
    assert decide(row, kb, vec, s) == {"id": "q1", "say": s.refusal, "source": "none",
                                       "status": "refused", "reason": "below_tau"}


def test_choose_mode_binds_answer_to_sentences():
    schema = answer_schema(["kb-a"], 50, ["One.", "Two."])
    assert schema["properties"]["answer"] == {"type": "string", "enum": ["One.", "Two."]}
    assert validate(reply("Three.", "kb-a"), schema)[2] == "schema_violation"
    assert validate(reply("Two.", "kb-a"), schema)[:3] == ("Two.", "kb-a", None)


def test_extractive_prefers_answer_type_then_slot(setup):
    from rag.voice.answer import extractive

    _, kb, _ = setup
    q = "how long does a refill take"
    pick = extractive(q, query_embedder().embed_one(q), ["kb-refills"], SentenceIndex.build(kb))
    assert pick.doc == "kb-refills" and "3 business days" in pick.sentence and 0.5 < pick.cosine <= 1.0
    assert pick.said == (pick.sentence,)   # it names its subject: said alone
    q = "what time do you close on weekdays"
    sentence = extractive(q, query_embedder().embed_one(q), ["kb-hours"], SentenceIndex.build(kb)).sentence
    assert sentence == "On weekdays we are open from 8:30 a.m. to 6 p.m."


def test_weak_extractive_pick_is_refused(setup, params):
    # q08's real transcript ("what hours can I do a video visit"): no cue survives, and the best
    # sentence (BM25 meets "doctor") is about referrals, cosine 0.20: under answer.min_sentence_cosine.
    import dataclasses

    from rag.config import answer_settings

    _, kb, _ = setup
    q = "on what our sky do a video visit with the doctor"
    row = {"id": "q08", "query": q, "retrieved": ["kb-telehealth", "kb-referrals"], "gated": False,
           "answer": None, "source": None, "error": "timeout"}
    s = answer_settings(params, tau=0.5)
    assert s.min_sentence_cosine == 0.25
    out = decide(row, kb, query_embedder().embed_one(q), s)
    assert (out["status"], out["say"], out["reason"]) == ("refused", s.refusal, "llm_timeout; sentence_below_min_cosine")
    said = decide(row, kb, query_embedder().embed_one(q), dataclasses.replace(s, min_sentence_cosine=0.0))
    assert (said["status"], said["say"]) == ("extractive", "Your doctor can refer you to a specialist.")
    # whatever ranks the sentences, a pick under the floor is refused (before, only the rules' pick was held to it)
    from conftest import ROOT
    from rag.voice.selection import AnswerScorer

    for design in ("listwise", "mlp"):
        scorer = AnswerScorer.load(ROOT / "models" / f"selection-{design}.json")
        scorer.min_score = 0.0  # the floor alone
        out = decide(row, kb, query_embedder().embed_one(q), s, scorer=scorer)
        assert out["status"] == "extractive" and out["say"] != "Your doctor can refer you to a specialist.", design
        high = dataclasses.replace(s, min_sentence_cosine=0.9)
        out = decide(row, kb, query_embedder().embed_one(q), high, scorer=scorer)
        assert (out["status"], out["reason"]) == ("refused", "llm_timeout; sentence_below_min_cosine"), design


def test_extractive_ranks_sentences_in_the_retrieval_mode():
    # Held-out vet KB, real transcript of t19 "what time should I bring my dog in for surgery": by
    # cosine the 10 p.m. fasting sentence wins; searched like passages (BM25 meets "surgery"), the drop-off.
    from conftest import ROOT

    from rag.voice.answer import extractive
    from rag.retrieval.search import HybridConfig

    kb = load_kb(ROOT / "fixtures" / "transfer" / "kb")
    q = "but what time should i bring my dog in for surgery"
    vec, sentences = query_embedder().embed_one(q), SentenceIndex.build(kb)
    hybrid = HybridConfig(rrf_k=10, weights=(1.0, 2.0), stopwords=frozenset("but what should i my in for".split()))
    assert extractive(q, vec, ["vet-surgery"], sentences, mode="dense").sentence.startswith("Do not feed your pet after 10 p.m.")
    assert extractive(q, vec, ["vet-surgery"], sentences, mode="hybrid_phonetic", hybrid=hybrid).sentence == \
        "Surgery drop-off is at 7:30 a.m."


@pytest.mark.parametrize("bad, message", [({"min_sentence_cosine": 1.5}, "min_sentence_cosine is a cosine"),
                                          ({"answer_mode": "pick"}, "answer.mode must be free or choose")])
def test_bad_answer_settings_are_named(bad, message):
    with pytest.raises(ValueError, match=message):
        AnswerSettings(**bad)


def test_an_llm_answer_repeating_what_the_caller_just_heard_is_replaced(setup):
    # a follow-up's `said` (rag.voice.pipeline.answer_turn): the antecedent turn's sentence is never said again
    index, kb, vec = setup
    s = AnswerSettings(timeout_s=5.0)
    saturday = "On Saturday we are open from 9 a.m. to 1 p.m."
    with Stub(reply(saturday, "kb-hours")) as stub:
        row = answer_row("q1", QUERY, index, vec, 0.9, s, kb, stub.url)
    assert decide(row, kb, vec, s)["say"] == saturday
    final = decide(row, kb, vec, s, said=frozenset({saturday}))
    assert final["status"] == "extractive" and final["reason"] == "repeats_earlier_answer"
    assert final["say"] == "On Saturday the pharmacy is open from 10 a.m. to 2 p.m." and final["source"] == "kb-pharmacy"


def test_a_declined_reply_ends_the_call_at_its_source(setup):
    """A reply that opens with source "none" cannot be said: the call is closed after its first pieces instead of
    waiting for the whole answer, and the extractive sentence is said with the reason source_none."""
    content = '{"source": "none", "answer": "' + "We might be open on Saturday. " * 8 + '"}'
    with Stub(content, piece_delay_s=0.05) as stub:  # the whole reply would stream for ~3.2 s
        row, final = said(setup, stub.url)
        assert stub.disconnected.wait(2.0), "the client kept reading a declined reply"
    schema = stub.requests[0]["response_format"]["json_schema"]["schema"]
    assert list(schema["properties"]) == ["source", "answer"] and schema["required"] == ["source", "answer"]
    assert (row["error"], row["source"], row["answer"]) == (None, "none", "")
    assert row["total_ms"] < 1500
    assert final == {"id": "q1", "say": "On Saturday we are open from 9 a.m. to 1 p.m.", "source": "kb-hours",
                     "status": "extractive", "reason": "source_none"}


def test_a_source_that_only_begins_with_none_is_read_to_the_end(setup):
    answer = "On Saturday we are open from 9 a.m. to 1 p.m."
    with Stub('{"source": "kb-hours", "answer": "' + answer + '"}') as stub:
        row, final = said(setup, stub.url)
    assert (row["source"], row["answer"]) == ("kb-hours", answer) and final["status"] == "llm"
    from rag.llm.client import DECLINED

    assert DECLINED.match('{"source": "none", "')
    assert not DECLINED.match('{"source": "none-such", "') and not DECLINED.match('{"answer": "none"')


def test_a_chosen_sentence_ends_the_call_once_it_is_the_only_one_that_fits(setup):
    """In choose mode the reply's answer is one of the offered sentences: once its beginning fits one of them only,
    the rest is known, the call is closed there, and that sentence is verified and said as a whole reply is."""
    answer = "On Saturday we are open from 9 a.m. to 1 p.m."
    content = '{"source": "kb-hours", "answer": "' + answer + '"}'
    with Stub(content, piece_delay_s=0.1) as stub:  # 21 pieces: the whole reply would stream for ~2.1 s
        row, final = said(setup, stub.url, answer_mode="choose")
        assert stub.disconnected.wait(2.0), "the client kept reading a reply whose sentence was already known"
    offered = stub.requests[0]["response_format"]["json_schema"]["schema"]["properties"]["answer"]["enum"]
    assert answer in offered and sum(o.startswith("On Saturday w") for o in offered) == 1
    assert (row["error"], row["source"], row["answer"]) == (None, "kb-hours", answer)
    assert row["total_ms"] < 1900
    assert final == {"id": "q1", "say": answer, "source": "kb-hours", "status": "llm", "reason": "verified"}


def test_a_choose_reply_that_fits_no_offered_sentence_is_read_to_the_end(setup):
    with Stub('{"source": "kb-hours", "answer": "We open at 9 a.m. on Saturday."}') as stub:
        row, final = said(setup, stub.url, answer_mode="choose")
    assert not stub.disconnected.is_set()
    assert (row["error"], row["answer"]) == ("schema_violation", None)
    assert (final["status"], final["reason"]) == ("extractive", "llm_schema_violation")


def test_chosen_waits_until_one_offered_sentence_fits():
    from rag.llm.client import chosen

    schema = answer_schema(["kb-a", "kb-b"], 200, ["We are closed.", "We are closed on Sunday.", "Café hours: 9."])
    begun = '{"source": "kb-a", "answer": "'
    assert chosen(begun + "We are clo", schema) is None  # both closing sentences still fit
    assert chosen(begun + "We are closed.", schema) == ("kb-a", "We are closed.")
    assert chosen(begun + "We are closed o", schema) == ("kb-a", "We are closed on Sunday.")
    assert chosen(begun + "Caf\\u00e9", schema) == ("kb-a", "Café hours: 9.")  # an escaped letter fits too
    assert chosen(begun + "Caf\\", schema) is None  # half an escape: wait
    assert chosen(begun + "Sure", schema) is None  # off the schema: read on, validation decides
    assert chosen('{"source": "kb-', schema) is None  # the answer has not begun
    assert chosen('{"answer": "We are closed.', schema) is None  # not the schema's order
    assert chosen(begun + "We are closed.", answer_schema(["kb-a"], 200)) is None  # free mode: nothing offered


def test_token_logprobs_are_kept_when_asked_and_malformed_ones_dropped():
    from rag.llm.client import ask, cited_schema

    schema = cited_schema(["1"], 40)
    content = json.dumps({"answer": "서울", "citations": ["1"]})
    def chunk(piece, lps, finish=None):
        return json.dumps({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": finish,
                                        "logprobs": {"content": lps}}]})
    events = [chunk(content[:14], [{"token": content[:14], "logprob": -0.5}]),
              chunk(content[14:16], [{"token": "서", "logprob": -1.25}, {"token": 7, "logprob": -1.0},
                                     {"token": "x", "logprob": "low"}]),
              chunk(content[16:], [{"token": content[16:], "logprob": -0.0}], "stop"), "[DONE]"]
    with Stub(events=events) as stub:
        r = ask(stub.url, [{"role": "user", "content": "q"}], schema, max_tokens=20, timeout_s=5, logprobs=True)
        plain = ask(stub.url, [{"role": "user", "content": "q"}], schema, max_tokens=20, timeout_s=5)
    assert (r.error, r.answer, r.citations) == (None, "서울", ["1"])
    assert r.token_logprobs == [(content[:14], -0.5), ("서", -1.25), (content[16:], 0.0)]
    assert stub.requests[0]["logprobs"] is True and stub.requests[0]["top_logprobs"] == 1
    assert "logprobs" not in stub.requests[1] and plain.token_logprobs is None
