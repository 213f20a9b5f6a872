"""RAGAS-style semantic metrics (rag.eval.semantic) and the list schema the judge is bound by (rag.llm.client)."""
import json

import numpy as np
import pytest

from llm_stub import Stub
from rag.eval.semantic import answer_relevancy, faithfulness
from rag.llm.client import LLMReply, ask, list_schema, validate_list


class Judge:
    """A scripted judge: returns the given replies in order and records what it was asked."""

    def __init__(self, *replies: LLMReply):
        self.replies, self.calls = list(replies), []

    def __call__(self, messages, schema):
        self.calls.append((messages, schema))
        return self.replies.pop(0)


def test_faithfulness_is_the_share_of_supported_statements():
    judge = Judge(LLMReply(items=["A flu shot costs $30.", "It needs a referral."]), LLMReply(items=["yes", "no"]))
    got = faithfulness(judge, "how much is a flu shot", "A flu shot costs $30 and needs a referral.",
                       "[kb-vaccines] A flu shot costs $30.")
    assert (got.score, got.verdicts, got.error) == (0.5, ["yes", "no"], None)
    # the verdict call is bound to exactly one yes/no per statement, and sees the context and numbered statements
    messages, schema = judge.calls[1]
    spec = schema["properties"]["verdicts"]
    assert (spec["minItems"], spec["maxItems"], spec["items"]["enum"]) == (2, 2, ["yes", "no"])
    assert "[kb-vaccines] A flu shot costs $30." in messages[1]["content"]
    assert "1. A flu shot costs $30.\n2. It needs a referral." in messages[1]["content"]


def test_a_failing_judge_gives_no_score_never_a_guess():
    got = faithfulness(Judge(LLMReply(error="invalid_json")), "q", "an answer", "ctx")
    assert (got.score, got.error) == (None, "invalid_json")
    got = faithfulness(Judge(LLMReply(items=["s"]), LLMReply(error="timeout")), "q", "an answer", "ctx")
    assert (got.score, got.parts, got.error) == (None, ["s"], "timeout")
    assert answer_relevancy(Judge(LLMReply(error="unreachable")), None, "q", "a").score is None


def test_refusals_are_not_judged():
    with pytest.raises(ValueError, match="refusals"):
        faithfulness(Judge(), "q", "  ", "ctx")
    with pytest.raises(ValueError, match="refusals"):
        answer_relevancy(Judge(), None, "q", "")
    with pytest.raises(ValueError, match="n must be"):
        answer_relevancy(Judge(), None, "q", "a", n=0)


def test_answer_relevancy_is_the_mean_cosine_of_the_written_questions_with_the_question():
    vectors = {"q": [1.0, 0.0], "same": [1.0, 0.0], "other": [0.0, 1.0], "half": [0.6, 0.8]}
    embed = lambda texts: np.array([vectors[t] for t in texts], dtype=np.float32)  # noqa: E731
    judge = Judge(LLMReply(items=["same", "other", "half"]))
    got = answer_relevancy(judge, embed, "q", "an answer", n=3)
    assert got.score == pytest.approx((1.0 + 0.0 + 0.6) / 3, abs=1e-6)
    assert got.parts == ["same", "other", "half"]
    spec = judge.calls[0][1]["properties"]["questions"]
    assert (spec["minItems"], spec["maxItems"]) == (3, 3)


def test_list_schema_and_its_validation():
    schema = list_schema("questions", 2, 3, max_len=10)
    assert validate_list('{"questions": ["a?", "b?"]}', schema) == (["a?", "b?"], None, "")
    assert validate_list('{"questions": ["a?"]}', schema)[1:] == ("schema_violation", "1 questions, expected 2..3")
    assert validate_list('{"questions": ["a?", "much too long?"]}', schema)[1] == "schema_violation"
    assert validate_list('{"questions": ["a?", ""]}', schema)[1] == "schema_violation"
    assert validate_list('{"questions": ["a?", 3]}', schema)[1] == "schema_violation"
    assert validate_list('{"questions": "a?"}', schema)[1] == "schema_violation"
    assert validate_list('{"other": ["a?", "b?"]}', schema)[1] == "schema_violation"
    assert validate_list('{"questions": ["a?", "b?"', schema)[1] == "invalid_json"
    verdicts = list_schema("verdicts", 2, 2, enum=("yes", "no"))
    assert validate_list('{"verdicts": ["yes", "no"]}', verdicts)[0] == ["yes", "no"]
    assert validate_list('{"verdicts": ["yes", "maybe"]}', verdicts)[1] == "schema_violation"
    with pytest.raises(ValueError):
        list_schema("x", 3, 2)


def test_ask_returns_a_list_reply_in_items():
    schema = list_schema("statements", 1, 4)
    with Stub(json.dumps({"statements": ["A flu shot costs $30."]})) as stub:
        reply = ask(stub.url, [{"role": "user", "content": "x"}], schema, max_tokens=64, timeout_s=10)
        sent = stub.requests[0]["response_format"]["json_schema"]["schema"]
    assert (reply.error, reply.items, reply.answer, reply.source) == (None, ["A flu shot costs $30."], None, None)
    assert sent == schema
    with Stub(json.dumps({"statements": []})) as stub:
        reply = ask(stub.url, [{"role": "user", "content": "x"}], schema, max_tokens=64, timeout_s=10)
    assert (reply.error, reply.items) == ("schema_violation", None)


def test_the_stage_summary_counts_refusals_apart_and_never_gives_nan(monkeypatch):
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "stages"))
    from semantic import correlation, summary

    assert correlation([0.1, 0.9], [False, True]) is None  # too few pairs
    assert correlation([0.5, 0.5, 0.5], [False, True, True]) is None  # a constant score
    assert correlation([0.0, 0.2, 0.9, 1.0], [False, False, True, True]) == 0.9831  # by hand: 0.85 / sqrt(0.7475)
    rows = [{"skipped": "refusal"}, {"skipped": "error"},
            {"skipped": None, "faithfulness": None, "relevancy": 0.5, "right": False, "supported": False,
             "semantic_pass": False},
            {"skipped": None, "faithfulness": 1.0, "relevancy": 0.9, "right": True, "supported": True,
             "semantic_pass": True},
            {"skipped": None, "faithfulness": 1.0, "relevancy": 0.3, "right": True, "supported": True,
             "semantic_pass": False}]
    m = summary(rows)
    assert (m["replies"], m["refusals"], m["errors"], m["judge_failed"], m["judged"]) == (5, 1, 1, 1, 2)
    assert (m["faithfulness"], m["relevancy"], m["rule_right"], m["semantic_pass"], m["agree"]) == (1.0, 0.6, 2, 1, 1)
    assert m["r_relevancy_right"] is None and m["faithfulness_ci"] == (1.0, 1.0)
    empty = summary([{"skipped": "refusal"}])
    assert (empty["faithfulness"], empty["faithfulness_ci"], empty["judged"]) == (None, (0.0, 0.0), 0)
