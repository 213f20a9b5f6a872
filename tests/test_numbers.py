"""Numbers as people say them (rag.voice.numbers), in queries (`rewrite`) and in KB sentences (`number_facts`)."""
import copy

import pytest

from rag.config import rewrite_rules
from rag.voice.numbers import Number, kept_zeros, read_numbers, to_words
from rag.retrieval.indexes import word_tokens
from rag.voice.rewrite import DEFAULT_RULES, RewriteRules, normalise, rewrite
from rag.voice.verify import answer_claims, number_facts, verify


@pytest.mark.parametrize("spoken, query", [
    ("a hundred and five", "105"),
    ("one hundred five", "105"),
    ("two thousand", "2000"),
    ("one eighty nine", "189"),
    ("a hundred eighty nine dollars", "189 dollars"),
    ("one hundred and eighty-nine dollars", "189 dollars"),
    ("two thousand and twenty four", "2024"),
    ("three hundred thousand", "300000"),
    ("nineteen hundred", "1900"),
    # clock times: hour and minutes, the words BM25 finds in a written "3:30 p.m."
    ("three thirty", "3 30"),
    ("quarter to eight", "7 45"),
    ("half past eight", "8 30"),
    ("quarter past nine", "9 15"),
    ("a quarter after nine", "9 15"),
    ("quarter to one", "12 45"),
    # years
    ("nineteen ninety", "1990"),
    ("twenty twenty four", "2024"),
    ("twenty fifteen", "2015"),
    # digit runs: "oh" is 0 between digits; 7 digits read as a phone number
    ("five five five oh one six two", "555 0162"),
    ("five five five zero one seven seven", "555 0177"),
    ("nine one one", "911"),
    # a number ends where the next one starts (HeySQuAD transcripts)
    ("two thousand and two thousand and seven", "2000 and 2007"),
    ("one one hundred eighteen", "1 118"),
    ("one hundred five hundred", "100 500"),
    ("two thousand three hundred", "2300"),
    ("two hundred twenty thousand", "220000"),
    # unchanged behaviour
    ("twenty four", "24"),
    ("DO I HAVE TO CALL TWENTY FOUR HOURS AHEAD", "do i have to call 24 hours ahead"),
    ("eight thirty or thirty one", "8 30 or 31"),
    ("three business days", "3 business days"),
    ("a", "a"),
    ("is a nurse in", "is a nurse in"),
    ("one of our nurses", "1 of our nurses"),
    ("a quarter of it", "a quarter of it"),
    ("quarter to fifty", "quarter to 50"),
])
def test_spoken_numbers_in_queries(spoken, query):
    assert rewrite(spoken) == query


def test_params_rules_read_the_same(params):
    rules = rewrite_rules(params)
    assert rewrite("a hundred and five", context=None, rules=rules) == "105"
    assert rewrite("um quarter to eight", rules=rules) == "7 45"
    assert rewrite("five five five oh one six two", rules=rules) == "555 0162"


def test_number_words_are_data(params):
    p = copy.deepcopy(params)
    p["rewrite"]["scales"]["million"] = 1000000
    p["rewrite"]["zero_words"] = []
    rules = rewrite_rules(p)
    assert rewrite("two million five hundred thousand", rules=rules) == "2500000"
    assert rewrite("five five five oh one six two", rules=rules) == "555162"   # "oh" only a filler now: 6 digits


def test_oh_is_a_filler_outside_digit_runs():
    assert rewrite("OH I UM WHAT TIME") == "i what time"
    assert rewrite("five oh") == "5"
    assert rewrite("oh two oh oh five oh") == "2005"
    assert sorted(kept_zeros("oh five oh oh one oh".split(), DEFAULT_RULES)) == [2, 3]


def test_times_stay_whole_in_parts():
    assert read_numbers("open at quarter to eight".split(), DEFAULT_RULES) == ["open", "at", Number(7, minutes=45)]
    parts = read_numbers("three thirty or one eighty nine".split(), DEFAULT_RULES)
    assert to_words(parts) == ["3", "30", "or", "189"]
    assert to_words(parts, clock_sep="h") == ["3h30", "or", "189"]


def test_spoken_time_matches_written_time_for_bm25():
    # "3:30 p.m." tokenises (\w+) into "3", "30": the rewritten query holds both.
    assert {"3", "30"} <= set(word_tokens(rewrite("do you close at three thirty")))
    assert {"3", "30"} <= set(word_tokens("We close at 3:30 p.m."))


@pytest.mark.parametrize("sentence, facts", [
    ("Our lab opens at quarter to eight.", {"7:45"}),
    ("It costs one hundred and eighty nine dollars.", {"189"}),
    ("It costs one hundred eighty-nine dollars.", {"189"}),
    ("We close at three thirty.", {"3:30"}),
    ("We close at three thirty p.m.", {"3:30", "15:30"}),
    ("We close at 3:30 p.m.", {"3:30", "15:30"}),
    ("We open at half past eight.", {"8:30"}),
    ("We open at quarter past nine.", {"9:15"}),
    ("Founded in nineteen ninety.", {"1990"}),
    ("New prices from twenty twenty four.", {"2024"}),
    ("Call five five five oh one six two.", {"555", "162"}),
    ("Call 555-0162.", {"555", "162"}),
    ("Results take three business days.", {"3"}),
])
def test_number_facts_of_kb_sentences(sentence, facts):
    assert number_facts(sentence) == facts


def test_answer_claims_read_spoken_times():
    assert answer_claims("We close at three thirty p.m.", DEFAULT_RULES) == {"15:30"}
    assert answer_claims("At quarter to eight.", DEFAULT_RULES) == {"7:45"}


def test_verify_matches_spoken_and_written_numbers():
    kb = {"kb-price": "# Price\n\nIt costs one hundred eighty-nine dollars.",
          "kb-hours": "# Hours\n\nOn Friday we close at 3:30 p.m.",
          "kb-lab": "# Lab\n\nOur lab opens at quarter to eight."}
    docs = list(kb)
    assert verify("189 dollars", "kb-price", docs, kb) == (True, "ok")
    assert verify("It costs 198 dollars.", "kb-price", docs, kb) == (False, "number_not_in_source")
    assert verify("We close at three thirty p.m. on Friday.", "kb-hours", docs, kb) == (True, "ok")
    assert verify("The lab opens at 7:45.", "kb-lab", docs, kb) == (True, "ok")
    assert verify("The lab opens at 8:45.", "kb-lab", docs, kb) == (False, "number_not_in_source")


@pytest.mark.parametrize("bad, message", [
    ({"scales": {"hundred": "100"}}, "rewrite.scales must map words to whole numbers"),
    ({"scales": {"hundred": 1}}, "rewrite.scales must be >= 2"),
    ({"fractions": {"quarter": 60}}, "rewrite.fractions must be minutes in 1..59"),
    ({"units": {"one": True}}, "rewrite.units must map words to whole numbers"),
])
def test_bad_number_tables_are_named(bad, message):
    with pytest.raises(ValueError, match=message):
        RewriteRules(**bad)


def test_normalise_keeps_words_around_numbers():
    assert normalise("Oh, a hundred and five dollars at three thirty? Call five five five oh one six two") == \
        ["105", "dollars", "at", "3", "30", "call", "555", "0162"]
