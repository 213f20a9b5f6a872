"""Summary memory across calls (issue 19 part 2): what a caller said about themselves, kept only in their own words,
used in their next call (rag.memory.preferences, rag.voice.pipeline.answer_turn / end_call)."""
import copy
import json
import sqlite3
import sys

import psycopg
import pytest

from conftest import ROOT
from llm_stub import Stub
from rag import config
from rag.io import InputError, read_params
from rag.llm.client import LLMReply, ask, record_schema, validate_record
from rag.memory import Memory, open_store
from rag.memory.preferences import grounded, mention, personalise, summarise, summary_messages
from rag.voice.gate import Gate

CALLER = "+1 555 010 4477"


@pytest.fixture(scope="module")
def p():
    return read_params(ROOT / "params.yaml")


@pytest.fixture(scope="module")
def rules(p):
    return config.preference_rules(p)


def test_grounded_keeps_only_values_the_caller_said(rules):
    heard = ["hi I have Aetna through my work", "and we've got two cats"]
    kept, dropped = grounded({"insurance": "Aetna", "pet": "cat", "day": "Saturday"}, heard, rules)
    assert kept == {"insurance": "aetna", "pet": "cat"}          # "cats" was said: a plural s either way
    assert dropped == {"day": "not said: saturday"}
    # the model copying the form's description, or naming only the field, is dropped, never stored
    kept, dropped = grounded({"insurance": "The name of the caller's own health ins", "pet": "my pet", "day": ""},
                             ["do you take my insurance", "how much for my pet"], rules)
    assert kept == {} and dropped["insurance"].startswith("not said: name") and dropped == {
        "insurance": dropped["insurance"], "pet": "only names the field"}


@pytest.mark.parametrize("heard, record, kept", [
    ("okay and by the way I have aetna through my work", {"insurance": "Aetna"}, {"insurance": "aetna"}),
    ("my insurance is blue cross", {"insurance": "Blue Cross"}, {"insurance": "blue cross"}),
    ("yeah hi my plan is cigna", {"insurance": "cigna"}, {"insurance": "cigna"}),
    ("my cat luna needs her shots", {"pet": "cat"}, {"pet": "cat"}),
    ("I have a large dog, a golden retriever", {"pet": "golden retriever"}, {"pet": "golden retriever"}),
    ("saturday is the only day I can come", {"day": "Saturday"}, {"day": "saturday"}),
    ("my husband is on medicare, I have aetna myself", {"insurance": "aetna"}, {"insurance": "aetna"}),
    # the one word between an article (or my / our) and the value is the caller's too: the KB may price it apart
    ("I have a small dog", {"pet": "dog"}, {"pet": "small dog"}),
    ("I have a large dog, a golden retriever", {"pet": "dog"}, {"pet": "large dog"}),
    ("we have a dog", {"pet": "dog"}, {"pet": "dog"}),
    ("we've got the two cats", {"pet": "cats"}, {"pet": "cats"}),
    # a question states nothing; what the caller says of someone else is not theirs
    ("hi are you open on saturday", {"day": "Saturday"}, {}),
    ("do you take medicaid", {"insurance": "medicaid"}, {}),
    ("my husband is on medicare, I have aetna myself", {"insurance": "medicare"}, {}),
    ("my wife has cigna but I don't have any insurance", {"insurance": "cigna"}, {}),
    ("my daughter has a cat but I'm calling about my dog", {"pet": "cat"}, {}),
    ("my daughter has a cat but I'm calling about my dog", {"pet": "dog"}, {"pet": "dog"}),
    # what the caller no longer has, or does not have, is not theirs now (report set r05 was told "cigna")
    ("I used to have cigna but now I have medicare", {"insurance": "cigna"}, {}),
    ("I used to have cigna but now I have medicare", {"insurance": "medicare"}, {"insurance": "medicare"}),
    ("my insurance is not aetna anymore, I switched to humana", {"insurance": "aetna"}, {}),
    ("my insurance is not aetna anymore, I switched to humana", {"insurance": "humana"}, {"insurance": "humana"}),
    ("I don't have a dog, I have a cat", {"pet": "dog"}, {}),
    ("I don't have a dog, I have a cat", {"pet": "cat"}, {"pet": "cat"}),
    ("we no longer have the cat", {"pet": "cat"}, {}),
    ("my cat is no longer with us", {"pet": "cat"}, {}),
    ("I have no dog", {"pet": "dog"}, {}),
    # a "no" opening the clause answers the call taker: the rest is still the caller's
    ("yeah no I have aetna", {"insurance": "aetna"}, {"insurance": "aetna"}),
    ("no no I have aetna", {"insurance": "aetna"}, {"insurance": "aetna"}),
])
def test_only_what_the_caller_states_as_theirs_is_kept(rules, heard, record, kept):
    got, dropped = grounded(record, [heard], rules)
    assert got == kept
    assert not kept or not dropped
    assert kept or list(dropped.values())[0].startswith("not stated as the caller's: ")


def test_personalise_fills_the_referent_with_the_stored_value(rules):
    assert personalise("do you take my insurance plan", {"insurance": "blue cross"}, rules) == (
        "do you take blue cross insurance", [("insurance", "blue cross")])   # the longest referent first
    assert personalise("How much is boarding for MY PET", {"pet": "cat", "insurance": "aetna"}, rules) == (
        "How much is boarding for cat", [("pet", "cat")])
    assert personalise("do you take my insurance", {}, rules) == ("do you take my insurance", [])
    assert personalise("do you take aetna", {"insurance": "cigna"}, rules) == ("do you take aetna", [])
    assert mention([("insurance", "aetna"), ("pet", "cat")], rules) == (
        "You told us you have aetna. You told us about your cat.")
    assert mention([], rules) == ""


def test_summarise_never_raises_and_says_why(rules):
    msgs = summary_messages(["I have cigna"], rules)
    assert msgs[1]["content"] == "Caller: I have cigna" and "- insurance: " in msgs[0]["content"]
    assert summarise(["I have cigna"], lambda m, s: LLMReply(error="timeout"), rules) == ({}, "llm: timeout")
    assert summarise([], lambda m, s: pytest.fail("no call without turns"), rules) == ({}, "no turns")
    reply = LLMReply(record={"insurance": "Humana", "pet": "", "day": "sunday"})
    assert summarise(["I can only come on sundays"], lambda m, s: reply, rules) == (
        {"day": "sunday"}, "dropped insurance (not said: humana)")


def test_record_schema_is_checked_on_the_client():
    schema = record_schema(["insurance", "pet"], 10)
    assert validate_record('{"insurance": " Aetna ", "pet": ""}', schema) == ({"insurance": "Aetna", "pet": ""}, None, "")
    assert validate_record('{"insurance": "Aetna"}', schema)[1] == "schema_violation"
    assert validate_record('{"insurance": 3, "pet": ""}', schema)[1] == "schema_violation"
    assert validate_record('{"insurance": "a very long name", "pet": ""}', schema)[1] == "schema_violation"
    with pytest.raises(ValueError, match="distinct"):
        record_schema(["pet", "pet"], 10)
    with Stub('{"insurance": "Aetna", "pet": ""}') as stub:   # ask() dispatches on the schema
        reply = ask(stub.url, [{"role": "user", "content": "x"}], schema, max_tokens=20, timeout_s=5)
    assert reply.error is None and reply.record == {"insurance": "Aetna", "pet": ""} and reply.answer is None


def test_a_bad_preference_form_in_params_is_named(p):
    bad = copy.deepcopy(p)
    del bad["memory"]["preferences"]["fields"]["pet"]["mention"]
    with pytest.raises(ValueError, match="memory.preferences.fields.pet needs means, referents and mention"):
        config.check(bad)
    for key, value in (("days", "a year"), ("max_len", None), ("timeout_s", "60s")):
        bad = copy.deepcopy(p)
        bad["memory"]["preferences"][key] = value
        with pytest.raises(ValueError, match=rf"memory\.preferences\.{key} must be a number"):
            config.check(bad)
    bad = copy.deepcopy(p)
    bad["memory"]["preferences"]["fields"]["pet"]["mention"] = "You have a pet."
    with pytest.raises(ValueError, match=r"\{value\}"):
        config.check(bad)


@pytest.fixture(params=["sqlite", "postgresql"])
def sql_store(request, tmp_path):
    if request.param == "sqlite":
        store = open_store(f"sqlite:///{tmp_path}/memory.sqlite3", 60.0, tmp_path / "cache")
        yield store, lambda: (tmp_path / "memory.sqlite3").read_bytes().decode("utf-8", "replace")
        store.close()
        return
    server = request.getfixturevalue("postgres_server")
    store = open_store(server.url, 60.0, tmp_path / "cache")

    def raw():
        with psycopg.connect(server.url) as c:
            return "\n".join(str(r) for r in c.execute("SELECT * FROM preferences"))
    yield store, raw
    store.close()
    with psycopg.connect(server.url) as c:
        c.execute("TRUNCATE turns, sessions, preferences")


def test_preferences_are_stored_by_caller_hash_latest_wins_and_expire(sql_store):
    store, raw = sql_store
    store.save_preferences(CALLER, {"insurance": "cigna", "pet": "cat"}, "call-1", at=1000.0)
    store.save_preferences(CALLER, {"insurance": "blue cross"}, "call-2", at=2000.0)
    store.save_preferences("+1 555 010 0000", {"insurance": "aetna"}, "call-3", at=2000.0)
    assert store.preferences(CALLER, 1e9, now=2500.0) == {"insurance": "blue cross", "pet": "cat"}
    assert CALLER not in raw() and "blue cross" in raw()
    assert store.preferences(CALLER, 1000.0, now=2500.0) == {"insurance": "blue cross"}  # the cat was 1500 s old
    assert "cat" not in raw()                                      # retention deletes, not only hides
    assert store.preferences("+1 555 010 9999", 1e9, now=2500.0) == {}


def test_forgetting_a_call_forgets_what_it_stated(sql_store):
    from rag.memory import Turn

    store, _ = sql_store
    store.append(Turn("call-1", 1, "I have cigna", "i have cigna", "ok", "extractive", "kb-insurance"), CALLER)
    store.save_preferences(CALLER, {"insurance": "cigna"}, "call-1")
    store.save_preferences(CALLER, {"pet": "dog"}, "call-2")
    assert store.forget("call-1") == 1
    assert store.preferences(CALLER, 1e9) == {"pet": "dog"}


def test_memory_without_a_sql_store_keeps_no_preferences_and_never_raises(redis_server, tmp_path):
    memory = Memory(open_store(redis_server.url, 60.0, tmp_path))
    assert memory.remember(CALLER, {"insurance": "aetna"}, "call-1") is None
    assert memory.preferences(CALLER, 1e9) == {}
    memory.close()
    broken = Memory(open_store("sqlite://", 60.0, tmp_path))
    broken.short.close()                                          # a store that fails on every call
    assert broken.remember(CALLER, {"insurance": "aetna"}, "c") is None and broken.preferences(CALLER, 1e9) == {}
    assert "preferences not stored" in broken.degraded and "preferences not read" in broken.degraded


@pytest.fixture(scope="module")
def clinic(p, tmp_path_factory):
    from rag.retrieval.kb_cache import open_kb
    from rag.voice.pipeline import follow_up_resolver

    kb = open_kb(ROOT / p["voice"]["kb"], config.hybrid_config(p), tmp_path_factory.mktemp("kbcache"))
    return Gate.load(ROOT / "models" / "gate.json"), kb, follow_up_resolver(kb, p)


def test_a_returning_caller_hears_the_answer_for_what_they_told_us(p, clinic, tmp_path):
    from rag.voice.pipeline import answer_turn, end_call

    gate, kb, resolver = clinic
    memory = Memory(open_store("sqlite://", 60.0, tmp_path))
    answer_turn("hi I have aetna through my work", "call-1", memory, p, gate, None, kb, resolver, CALLER)
    answer_turn("where do I park", "call-1", memory, p, gate, None, kb, resolver, CALLER)
    asked = []

    def llm(messages, schema):  # a model that also invents a pet
        asked.append(messages[1]["content"])
        return LLMReply(record={"insurance": "Aetna", "pet": "dog", "day": ""})
    assert end_call("call-1", CALLER, memory, p, llm) == ({"insurance": "aetna"}, "dropped pet (not said: dog)")
    assert asked == ["Caller: hi I have aetna through my work\nCaller: where do I park"]
    final, _, res = answer_turn("do you take my insurance", "call-2", memory, p, gate, None, kb, resolver, CALLER)
    assert res.query == "do you take aetna insurance"
    assert final["preferences"] == [["insurance", "aetna"]]
    assert final["say"] == "You told us you have aetna. We accept Blue Cross, Aetna, Cigna and Medicare."
    # its follow-up does not hear that KB sentence again though what was said began with the mention
    final, _, res = answer_turn("and what about medicaid", "call-2", memory, p, gate, None, kb, resolver, CALLER)
    assert res.kind == "opener" and final["say"] == "We do not accept Medicaid plans from other states."
    # another caller, and the same caller without an id, hear no one's preferences
    for caller in ("+1 555 010 0000", None):
        final, _, res = answer_turn("do you take my insurance", "call-3", memory, p, gate, None, kb, resolver, caller)
        assert "preferences" not in final and "told us" not in final["say"] and "aetna" not in res.query
    assert end_call("call-3", CALLER, memory, p, None) == ({}, "llm down")
    memory.close()


def test_chat_remembers_the_caller_for_the_next_call(small_kb, tmp_path, monkeypatch, capsys):
    import io

    from rag.__main__ import main

    for var in ("RAG_MEMORY_URL", "RAG_MEMORY_ARCHIVE_URL", "RAG_CALLER_KEY"):
        monkeypatch.delenv(var, raising=False)
    cache = tmp_path / "cache"
    record = {"insurance": "", "pet": "", "day": "saturday"}
    with Stub(json.dumps(record)) as stub:  # every call gets the form: the answers fall back (schema violation)
        monkeypatch.setattr("sys.stdin", io.StringIO("I can only come in on saturday\n\n"))
        assert main(["chat", "--caller", CALLER, "--kb", str(small_kb), "--llm-url", stub.url, "--cache-dir",
                     str(cache), "--json"]) == 0
        assert "remembered for the caller's next call: day = saturday" in capsys.readouterr().err
    monkeypatch.setattr("sys.stdin", io.StringIO("what time do you open on my day off\n"))
    assert main(["chat", "--caller", CALLER, "--kb", str(small_kb), "--llm-url", "http://127.0.0.1:9",
                 "--cache-dir", str(cache), "--json"]) == 0
    out = capsys.readouterr()
    turn = json.loads(out.out.splitlines()[0])
    assert turn["query"] == "what time do you open on saturday"
    assert turn["say"] == "You told us you can come on saturday. On Saturday we are open from 9 a.m. to 1 p.m."
    assert "remembered for the caller's next call: nothing (llm down)" in out.err
    with sqlite3.connect(cache / "memory.sqlite3") as c:
        rows = c.execute("SELECT caller_hash, field, value FROM preferences").fetchall()
    assert len(rows) == 1 and rows[0][1:] == ("day", "saturday") and CALLER not in rows[0][0]


def test_the_fixture_of_returning_callers_is_well_formed(tmp_path):
    sys.path.insert(0, str(ROOT / "stages"))
    from preferences import load_callers

    callers = load_callers(ROOT / "fixtures" / "dialogues" / "preferences.jsonl")
    assert len(callers) == 21 and sum(k["value"] is None for c in callers for k in c["checks"]) == 4
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"caller": "x", "kb": "clinic", "calls": [["hi"]],
                               "checks": [{"call": 2, "turn": 1, "field": "insurance", "facts": []}]}) + "\n")
    with pytest.raises(InputError, match=r"bad.jsonl:1: caller 'x'"):
        load_callers(bad)
