from rag.config import rewrite_rules
from rag.rewrite import DEFAULT_RULES, rewrite, weekday_of


def test_seed_example():
    assert rewrite("O K AND WHAT ABOUT SUNDAY", "OHI WHAT TIME DO YOU GUISE OPEN ON SATURDAY") == \
        "what time do you guise open on sunday"


def test_number_words():
    assert rewrite("DO I HAVE TO CALL TWENTY FOUR HOURS AHEAD") == "do i have to call 24 hours ahead"
    assert rewrite("eight thirty or thirty one") == "8 30 or 31"


def test_fillers_and_punctuation():
    assert rewrite("Um, uh... oh hi, WHAT'S the price?") == "whats the price"


def test_follow_up_without_weekday_appends():
    assert rewrite("and what about for cats", "how much is a rabies shot") == "how much is a rabies shot for cats"


def test_follow_up_without_context_is_plain():
    assert rewrite("okay and what about sunday") == "and what about sunday"


def test_weekday_plurals_and_possessives():
    assert weekday_of("saturdays") == "saturday" and weekday_of("sundays") == "sunday"
    assert rewrite("SAME FOR SUNDAY'S", "WHAT TIME DO YOU CLOSE ON SATURDAYS") == "what time do you close on sunday"


def test_more_openers():
    ctx = "what time do you open on saturday"
    assert rewrite("and how about sunday", ctx) == "what time do you open on sunday"
    assert rewrite("what about on sunday", ctx) == "what time do you open on sunday"
    assert rewrite("and on sunday", ctx) == "what time do you open on sunday"


def test_params_match_library_defaults(params):
    # The stages use params.yaml; `rewrite()` without rules uses the defaults: they must not drift.
    from dataclasses import replace

    assert replace(rewrite_rules(params), swap_classes=()) == DEFAULT_RULES


def test_service_follow_up_swaps_the_service(params):
    rules = rewrite_rules(params)
    assert rewrite("OKAY AND WHAT ABOUT A BLOOD TEST", "UM HOW MUCH IS A FLU SHOT", rules) == "how much is a blood test"
    assert rewrite("and what about blood tests", "how much is a flu shot", rules) == "how much is a blood test"
    # No service in the context: append, as before.
    assert rewrite("and what about a blood test", "how much does it cost", rules) == \
        "how much does it cost a blood test"
