"""Calls with memory through the CLI: `rag chat`, `rag ask --session`, `rag forget` (issue 13)."""
import io
import json
import sqlite3

import pytest

from rag.__main__ import main
from rag.memory import open_store

from conftest import ROOT

DOWN = "http://127.0.0.1:9"  # nothing listens there: every answer is the verified extractive fallback
CLARIFY = "Sorry, what would you like to know about that?"


@pytest.fixture
def call(small_kb, tmp_path, monkeypatch, capsys):
    """Run one CLI command on the small KB with the LLM down and a private cache (memory) folder."""
    for var in ("RAG_MEMORY_URL", "RAG_MEMORY_ARCHIVE_URL", "RAG_CALLER_KEY"):
        monkeypatch.delenv(var, raising=False)
    cache = tmp_path / "cache"

    def run(*args, stdin=None):
        if stdin is not None:
            monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        code = main([*args, "--kb", str(small_kb), "--llm-url", DOWN, "--cache-dir", str(cache), "--json"])
        out = capsys.readouterr()
        return code, out.out, out.err
    def forget(session):
        code = main(["forget", "--session", session, "--cache-dir", str(cache)])
        return code, capsys.readouterr().out

    run.cache, run.forget = cache, forget
    return run


def chat_turns(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


def test_chat_resolves_follow_ups_from_the_call(call):
    code, out, err = call("chat", "--session", "call-1", stdin="what about sunday\nwhat time do you open on saturday\n"
                          "and on sunday\ndo you take personal checks\nwhat about credit cards\n\nnever read\n")
    assert code == 0 and "session call-1 (memory: sqlite)" in err
    turns = chat_turns(out)
    assert [t["resolved_as"] for t in turns] == ["no_antecedent", "standalone", "opener", "standalone", "opener"]
    assert turns[0]["say"] == CLARIFY and turns[0]["reason"] == "no_antecedent" and turns[0]["status"] == "refused"
    assert turns[1]["say"] == "On Saturday we are open from 9 a.m. to 1 p.m."
    assert turns[2]["query"] == "what time do you open on sunday" and turns[2]["say"] == "We are closed on Sunday."
    assert turns[3]["say"] == "We do not accept personal checks."
    assert turns[4]["say"] == "We accept cash, debit and credit cards."  # the empty line ended the call


def test_a_follow_up_is_not_answered_with_what_the_caller_just_heard(call):
    # "how long does it take" has nothing specific of its own: merged with the blood-test question, whose best
    # sentence is the price the caller heard a turn ago; the next best answers the new question
    turns = chat_turns(call("chat", stdin="how much is a blood test\nand how long does it take\n")[1])
    assert turns[0]["say"] == "A blood test costs $45."
    assert (turns[1]["resolved_as"], turns[1]["say"]) == ("ellipsis", "Lab results are ready within 3 business days.")


def test_ask_session_spans_processes_and_forget_deletes_it(call):
    code, out, _ = call("ask", "what time do you open on saturday", "--session", "call-2")
    assert code == 0 and json.loads(out)["resolved_as"] == "standalone"
    code, out, _ = call("ask", "and what about sunday?", "--session", "call-2")
    got = json.loads(out)
    assert (got["resolved_as"], got["query"], got["say"]) == ("opener", "what time do you open on sunday",
                                                              "We are closed on Sunday.")
    # another call never sees this one's turns
    assert json.loads(call("ask", "and what about sunday?", "--session", "call-3")[1])["resolved_as"] == "no_antecedent"
    assert call.forget("call-2") == (0, "session call-2: deleted 2 turns from sqlite\n")
    assert json.loads(call("ask", "and what about sunday?", "--session", "call-2")[1])["say"] == CLARIFY


def test_caller_id_is_kept_only_as_a_hash(call):
    call("ask", "do you take personal checks", "--session", "call-4", "--caller", "+1-555-0100")
    db = call.cache / "memory.sqlite3"
    assert b"555-0100" not in db.read_bytes()
    (caller_hash,) = sqlite3.connect(db).execute("SELECT caller_hash FROM sessions WHERE id = 'call-4'").fetchone()
    assert len(caller_hash) == 64 and int(caller_hash, 16)


def test_memory_server_down_still_answers_on_the_embedded_store(call, monkeypatch):
    monkeypatch.setenv("RAG_MEMORY_URL", "redis://127.0.0.1:1/0")  # nothing listens there
    code, out, err = call("ask", "what time do you open on saturday", "--session", "call-5")
    assert code == 0 and json.loads(out)["say"] == "On Saturday we are open from 9 a.m. to 1 p.m."
    assert "redis at 127.0.0.1:1 unreachable" in err and "switched to sqlite" in err
    got = json.loads(call("ask", "and on sunday", "--session", "call-5")[1])
    assert got["resolved_as"] == "opener" and got["say"] == "We are closed on Sunday."  # the fallback kept the turn


def test_chat_uses_redis_and_the_postgresql_archive(call, monkeypatch, redis_server, postgres_server):
    monkeypatch.setenv("RAG_MEMORY_URL", redis_server.url)
    monkeypatch.setenv("RAG_MEMORY_ARCHIVE_URL", postgres_server.url)
    code, out, err = call("chat", "--session", "call-6", stdin="what time do you open on saturday\nand on sunday\n")
    assert code == 0 and "memory: redis" in err and "unreachable" not in err and "switched" not in err
    for url in (redis_server.url, postgres_server.url):
        store = open_store(url, 60.0)
        assert [(t.n, t.query, t.say) for t in store.turns("call-6")] == [
            (1, "what time do you open on saturday", "On Saturday we are open from 9 a.m. to 1 p.m."),
            (2, "what time do you open on sunday", "We are closed on Sunday.")]
        store.close()
    assert call.forget("call-6") == (0, "session call-6: deleted 2 turns from redis, 2 turns from postgresql, "
                                        "0 turns from sqlite\n")
    for url in (redis_server.url, postgres_server.url):
        store = open_store(url, 60.0)
        assert store.turns("call-6") == []
        store.close()


def test_a_refused_turn_is_nothing_to_follow_up_on(call):
    # vet dialogue: "so what about on sunday" after a greeting the gate refused was merged with the greeting and
    # answered; a refused turn is no topic, so the follow-up gets the clarifying question
    turns = chat_turns(call("chat", stdin="who won the football game last night\nso what about on sunday\n"
                                          "what time do you open on saturday\nand on sunday\n")[1])
    assert [(t["resolved_as"], t["status"]) for t in turns] == [
        ("standalone", "refused"), ("no_antecedent", "refused"), ("standalone", "extractive"), ("opener", "extractive")]
    assert turns[1]["say"] == CLARIFY and turns[3]["say"] == "We are closed on Sunday."


def test_session_is_for_the_voice_track_and_excludes_context(call):
    assert call("ask", "토요일에 몇 시에 열어요?", "--session", "s")[0] == 2
    with pytest.raises(SystemExit):
        call("ask", "and on sunday", "--session", "s", "--context", "what time do you open on saturday")


def test_chat_survives_bytes_that_are_not_utf8(call, monkeypatch, capsys, small_kb):
    # stdin decoded strictly (a UTF-8 locale): before, the bad byte raised UnicodeDecodeError out of `rag chat`;
    # decoded with surrogateescape (C locale) it disabled memory for the rest of the call
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(
        b"what \xff time do you open on saturday\nand on sunday\n"), encoding="utf-8"))
    code = main(["chat", "--session", "call-8", "--caller", "\udcff", "--kb", str(small_kb), "--llm-url", DOWN,
                 "--cache-dir", str(call.cache), "--json"])
    out, err = capsys.readouterr()
    assert code == 0 and "no memory" not in err
    turns = chat_turns(out)
    assert turns[0]["question"] == "what \ufffd time do you open on saturday"
    assert (turns[1]["resolved_as"], turns[1]["say"]) == ("opener", "We are closed on Sunday.")
    out.encode("utf-8")  # valid UTF-8 JSON lines


@pytest.mark.parametrize("session, why", [("", "--session is empty"), ("  ", "--session is empty"),
                                          ("a\nb", "--session 'a\\nb' holds a control character"),
                                          ("x" * 201, "--session is 201 characters long (at most 200)"),
                                          ("a\u2028b", "--session 'a\\u2028b' holds a control character"),
                                          ("call\u202e1", "--session 'call\\u202e1' holds a control character")])
def test_a_bad_session_id_exits_2_and_writes_nothing(call, session, why):
    # before: "" was taken as no session (ask) or a new random one (chat), exit 0
    for args in (("ask", "what time do you open on saturday", "--session", session), ("chat", "--session", session)):
        code, out, err = call(*args, stdin="what time do you open on saturday\n")
        assert (code, out) == (2, "") and err.startswith(f"error: {why}") and len(err.splitlines()) == 1
    assert call.forget(session)[0] == 2
    assert not (call.cache / "memory.sqlite3").exists()


def test_odd_but_valid_session_ids_are_kept_apart(call):
    for session in ("*", "call-?", "[ab]", "x'; DROP TABLE turns; --", "../../etc/passwd", "호출 1"):
        call("ask", "what time do you open on saturday", "--session", session)
    got = json.loads(call("ask", "and on sunday", "--session", "x'; DROP TABLE turns; --")[1])
    assert (got["resolved_as"], got["say"]) == ("opener", "We are closed on Sunday.")
    assert call.forget("*") == (0, "session *: deleted 1 turns from sqlite\n")
    assert call.forget("call-?") == (0, "session call-?: deleted 1 turns from sqlite\n")
    assert json.loads(call("ask", "and on sunday", "--session", "[ab]")[1])["resolved_as"] == "opener"


def test_a_corrupt_memory_file_still_answers_and_forget_says_it_could_not(call, capsys):
    call.cache.mkdir()
    db = call.cache / "memory.sqlite3"
    db.write_bytes(b"garbage" * 1000)
    code, out, err = call("ask", "what time do you open on saturday", "--session", "call-9")  # before: traceback
    assert code == 0 and json.loads(out)["say"] == "On Saturday we are open from 9 a.m. to 1 p.m."
    assert f"warning: sqlite at {db} could not be opened (DatabaseError: file is not a database): no memory" in err
    assert db.read_bytes() == b"garbage" * 1000
    assert main(["forget", "--session", "call-9", "--cache-dir", str(call.cache)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: session not forgotten everywhere: sqlite at") and len(err.splitlines()) == 1


def test_forget_with_a_store_down_exits_1_and_never_shows_the_password(call, monkeypatch, capsys):
    # before: the unreachable Redis was replaced by the embedded store, "deleted 0 turns from sqlite", exit 0
    monkeypatch.setenv("RAG_MEMORY_URL", "redis://:s3cret-pw@127.0.0.1:1/0")
    assert main(["forget", "--session", "call-10", "--cache-dir", str(call.cache)]) == 1
    err = capsys.readouterr().err
    assert err == ("error: session not forgotten everywhere: redis at 127.0.0.1:1 unreachable (ConnectionError): "
                   "switched to sqlite (deleted: {'sqlite': 0}) (the reachable stores were cleared; run forget again "
                   "when it is back)\n")


def test_an_unknown_memory_url_names_the_variable_not_params(call, monkeypatch):
    monkeypatch.setenv("RAG_MEMORY_URL", "mongodb://u:s3cret-pw@host/db")
    code, out, err = call("ask", "what time do you open on saturday", "--session", "call-11")
    assert (code, out) == (2, "") and "s3cret-pw" not in err
    assert err == ("error: $RAG_MEMORY_URL: memory URL: unknown scheme 'mongodb' (use sqlite://, redis://, unix://, "
                   "postgresql://)\n")


class HangUp(io.StringIO):
    """stdin whose caller presses Ctrl-C after the first line."""

    def readline(self, *args):
        line = super().readline(*args)
        if not line:
            raise KeyboardInterrupt
        return line


def test_ctrl_c_ends_the_call_like_an_empty_line(call, monkeypatch, capsys, small_kb):
    # before: a KeyboardInterrupt traceback
    monkeypatch.setattr("sys.stdin", HangUp("what time do you open on saturday\n"))
    code = main(["chat", "--session", "call-12", "--kb", str(small_kb), "--llm-url", DOWN, "--cache-dir",
                 str(call.cache), "--json"])
    out, err = capsys.readouterr()
    assert code == 130 and "Traceback" not in err and "session call-12 ended" in err
    assert [t["say"] for t in chat_turns(out)] == ["On Saturday we are open from 9 a.m. to 1 p.m."]
    got = json.loads(call("ask", "and on sunday", "--session", "call-12")[1])  # the turn before Ctrl-C was kept
    assert (got["resolved_as"], got["say"]) == ("opener", "We are closed on Sunday.")


@pytest.fixture
def chat_on(tmp_path, monkeypatch, capsys):
    """``chat_on(kb folder, lines)``: the turns (JSON) of one `rag chat` call on that KB, LLM down, no memory server."""
    for var in ("RAG_MEMORY_URL", "RAG_MEMORY_ARCHIVE_URL", "RAG_CALLER_KEY"):
        monkeypatch.delenv(var, raising=False)

    def run(kb, lines):
        monkeypatch.setattr("sys.stdin", io.StringIO("".join(f"{line}\n" for line in lines)))
        assert main(["chat", "--kb", str(kb), "--llm-url", DOWN, "--cache-dir", str(tmp_path / "cache"),
                     "--json"]) == 0
        return chat_turns(capsys.readouterr().out)
    return run


def test_a_follow_up_hears_the_same_sentence_again_when_it_holds_what_is_now_asked(tmp_path, chat_on):
    # the bike shop's one sentence holds the price and the duration: "and how long does it take" after the price
    # must not be pushed to another sentence (the never-repeat rule yields when the sentence holds the asked type)
    kb = tmp_path / "bikes"
    kb.mkdir()
    (kb / "tuneups.md").write_text("# Tune-ups\n\nA basic tune-up costs $60 and takes about 90 minutes. "
                                   "Bring your bike in before noon.\n")
    (kb / "rentals.md").write_text("# Rentals\n\nA city bike rents for $25 a day. Helmets are included.\n")
    (kb / "hours.md").write_text("# Hours\n\nThe shop is open from 9 a.m. to 6 p.m. every day except Monday.\n")
    (kb / "repairs.md").write_text("# Repairs\n\nA flat tire repair costs $15. Most repairs are done the same day.\n")
    turns = chat_on(kb, ["how much is a tune up", "and how long does it take"])
    assert [t["say"] for t in turns] == ["A basic tune-up costs $60 and takes about 90 minutes."] * 2
    assert turns[1]["resolved_as"] == "ellipsis"


def test_what_a_follow_up_adds_is_in_what_is_said(chat_on):
    # Harbor Dental (a choose KB): "and checks" is merged with the card question, whose sentence the caller just
    # heard; it names checks, so it is said again (not "Bring a photo ID and your insurance card.", where the
    # merged query's "cards" led); "what about a receipt" gets the sentence naming a receipt, not the card one
    turns = chat_on(ROOT / "fixtures" / "dental" / "kb", ["you take credit cards", "and checks", "what about a receipt"])
    assert [t["resolved_as"] for t in turns] == ["standalone", "ellipsis", "opener"]
    assert [t["say"] for t in turns] == ["We accept cash, credit cards and checks."] * 2 + [
        "We send a receipt by email after every visit."]


def test_a_follow_up_refused_as_merged_is_asked_again_in_its_own_words(chat_on):
    # the clinic: "what about the chest pain" after a video-visit price is searched as "how much do visits cost the
    # chest pain", which is refused; its focus ("chest", "pain") alone finds the emergency sentence
    turn = chat_on(ROOT / "fixtures" / "voice" / "kb", ["how much do video visits cost", "what about the chest pain"])[1]
    assert (turn["resolved_as"], turn["query"]) == ("opener", "how much do visits cost the chest pain")
    assert turn["say"] == "If you have chest pain or trouble breathing, call 911." and turn["status"] == "extractive"
    assert turn["reason"].startswith("own_words; ")
