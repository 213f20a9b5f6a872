"""rag.llm.rewrite: a schema-bound rewrite is searched only when it passed; every fault falls back to the rule query
with the cause in ``reason`` (LLM stub, no model). The real model's rewrite is `heavy_llm`."""
import json

import pytest

from llm_stub import Stub
from rag.llm.rewrite import LLMResolver, RewriteSettings, invented_words, llm_rewrite, topics, vocabulary
from rag.llm.server import free_port
from rag.voice.followup import Resolver

DOCS = {"kb-vaccines": "# Vaccines\n\nFlu shots are free for seniors over 65. A flu shot costs $25 otherwise.",
        "kb-refills": "# Prescription Refills\n\nPrescription refills are processed within 3 business days.",
        "kb-hours": "# Opening Hours\n\nWe are open 8:30 a.m. to 6 p.m. on weekdays and closed on Sunday."}
VOCAB = vocabulary(DOCS)
TOPICS = topics(DOCS)
FAST = RewriteSettings(timeout_s=1.0)


def reply(query):
    return json.dumps({"query": query})


def call(url, transcript="I'M ON THE REEF OPAQUE", earlier=(), fallback="im reef opaque", **kw):
    return llm_rewrite(transcript, list(earlier), fallback, url, VOCAB, TOPICS, FAST, **kw)


def test_topics_are_the_document_titles():
    assert TOPICS == "Vaccines, Prescription Refills, Opening Hours"


def test_a_passing_rewrite_is_searched_after_rules_1_to_3():
    with Stub(reply("Um, how long does a prescription refill take?")) as stub:
        r = call(stub.url)
    assert (r.source, r.reason, r.query) == ("llm", None, "how long does a prescription refill take")
    assert r.llm_text == "Um, how long does a prescription refill take?" and r.ms > 0
    body = stub.requests[0]
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["query"]["maxLength"] == 120 and schema["required"] == ["query"]
    assert (body["temperature"], body["seed"], body["max_tokens"]) == (0.0, 0, 64)
    assert "Prescription Refills" in body["messages"][0]["content"]
    assert "rule-based guess" not in body["messages"][1]["content"]


def test_rules_then_llm_shows_the_rule_query_and_the_last_earlier_questions():
    with Stub(reply("Is the flu shot free for seniors?")) as stub:
        r = call(stub.url, "IS IT FREE FOR SENIORS", ["what time do you open", "how much is a flu shot"],
                 "is flu shot free for seniors", show_fallback=True)
    user = stub.requests[0]["messages"][1]["content"]
    assert "A rule-based guess: is flu shot free for seniors" in user
    assert "Earlier questions in this call: what time do you open; how much is a flu shot" in user
    assert r.query == "is the flu shot free for seniors"


def test_invented_content_word_falls_back_to_the_rules():
    with Stub(reply("What is the color of the reef?")) as stub:
        r = call(stub.url)
    assert (r.source, r.reason, r.query, r.invented) == ("rules", "invented", "im reef opaque", ("color",))
    assert r.llm_text == "What is the color of the reef?"


def test_kb_words_and_numbers_from_the_transcript_are_not_invented():
    assert invented_words("How long do refills take?", ["reef opaque"], VOCAB) == []
    assert invented_words("Is it three dollars?", ["is it 3 dollars"], VOCAB) == []
    assert invented_words("Is it 40 dollars for dental cleaning?", ["how much"], VOCAB) == [
        "40", "dollars", "dental", "cleaning"]  # the KB writes $25, never "dollars"


@pytest.mark.parametrize("stub_kwargs, reason", [
    (dict(status=500), "http_error"),
    (dict(status=503), "busy"),
    (dict(content='{"query": "how long does a ref'), "invalid_json"),
    (dict(content="How long does a refill take?"), "invalid_json"),            # schema ignored
    (dict(content='{"answer": "refills"}'), "schema_violation"),
    (dict(content=reply("   ")), "schema_violation"),                           # blank
    (dict(content=reply("x" * 121)), "schema_violation"),                       # over maxLength
    (dict(content=reply("um uh"), finish_reason="stop"), "empty"),              # nothing left after the fillers
    (dict(content='{"query": "how long', finish_reason="length"), "truncated"),
    (dict(content=reply("how long does a refill take"), delay_s=2.0), "timeout"),
])
def test_faults_fall_back_to_the_rule_query(stub_kwargs, reason):
    with Stub(**stub_kwargs) as stub:
        r = call(stub.url)
    assert (r.source, r.reason, r.query) == ("rules", reason, "im reef opaque")


def test_no_server_and_unreachable_server():
    assert call(None).reason == "no_server" and call(None).ms is None
    r = call(f"http://127.0.0.1:{free_port()}")
    assert (r.source, r.reason) == ("rules", "unreachable")


def test_resolver_keeps_the_rule_kind_and_never_resolves_a_turn_without_antecedent():
    rules = Resolver(DOCS)
    with Stub(reply("Is the flu shot free for seniors?")) as stub:
        llm = LLMResolver(rules, stub.url, VOCAB, TOPICS, "llm", FAST)
        first = llm.resolve("AND WHAT ABOUT SUNDAY", [])              # an opener opening a call
        res = llm.resolve("IS IT FREE FOR SENIORS", ["how much is a flu shot"])
    assert first == rules.resolve("AND WHAT ABOUT SUNDAY", []) and first.kind == "no_antecedent"
    assert len(stub.requests) == 1                                     # the no_antecedent turn called nothing
    assert (res.query, res.kind, res.antecedent) == ("is the flu shot free for seniors", "pronoun",
                                                     "how much is a flu shot")
    assert llm.rewrites[0] is None and llm.rewrites[1].source == "llm"
    with pytest.raises(ValueError, match="mode must be one of"):
        LLMResolver(rules, None, VOCAB, TOPICS, "llm_only")


@pytest.mark.heavy_llm
def test_real_qwen_rewrites_a_follow_up():
    from rag.llm.server import LocalServer

    with LocalServer(model="qwen2.5-coder-1.5b", threads=1, n_ctx=2048, cache_ram_mib=0) as server:
        r = llm_rewrite("OKAY AND WHAT ABOUT SUNDAY", ["what time do you open on saturday"],
                        "what time do you open on sunday", server.url, VOCAB, TOPICS, RewriteSettings(timeout_s=60))
    assert r.source == "llm", r
    assert "sunday" in r.query.split() and "open" in r.query.split()
