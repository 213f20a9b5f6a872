from rag.config import rewrite_rules
from rag.voice.rewrite import DEFAULT_RULES, rewrite, weekday_of


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


def test_contrast_pairs_are_one_word_differences():
    from rag.voice.rewrite import contrast_pairs

    sentences = ["A rabies shot for a dog costs $35.", "A rabies shot for a cat costs thirty.",
                 "On Saturday we open at 9 a.m.", "On Sunday we open at 10 a.m.",   # weekdays: rule 4 has them
                 "We groom dogs.", "We groom dogs and cats.",                        # lengths differ
                 "Boarding costs $45 a night.", "Boarding costs $28 a night."]       # numbers only
    assert contrast_pairs(sentences) == (("cat", "dog"),)
    assert contrast_pairs([]) == ()


def test_follow_up_swaps_a_pair_the_kb_contrasts(params):
    # Held-out vet KB, t06: "And how about for cats?" after the dog question (clean ASR).
    from conftest import ROOT

    from rag.retrieval.chunk import chunk_folder

    context = "how much is the rabies shot for my dog"
    assert rewrite("AND HOW ABOUT FOR CATS", context, rewrite_rules(params)) == \
        "how much is the rabies shot for my dog for cats"
    rules = rewrite_rules(params, chunk_folder(ROOT / "fixtures" / "transfer" / "kb"))
    assert ("cat", "dog") in rules.swap_classes
    assert rewrite("AND HOW ABOUT FOR CATS", context, rules) == "how much is the rabies shot for my cat"
