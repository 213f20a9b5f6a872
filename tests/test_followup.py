"""Follow-up resolution in a session (rag.voice.followup): openers, pronouns, ellipsis, nothing to lean on."""
import pytest

from rag import config
from rag.retrieval.chunk import load_kb
from rag.voice.followup import FollowUpRules, Resolution, Resolver
from rag.voice.rewrite import RewriteRules
from rag.retrieval.search import PassageIndex

DOCS = {  # five documents: "cost" and "dog" are everywhere, "pharmacy", "patel", "boarding" in one each
    "hours": "We are open from 8 a.m. to 6 p.m. on weekdays. On Saturday we open at 9 a.m. A visit for a dog costs $50.",
    "pharmacy": "The pharmacy opens at 10 a.m. on Saturday. The pharmacy is closed on Sunday. Dog pills cost $9.",
    "doctors": "Doctor Patel works on Monday and Tuesday. Doctor Kim works on Friday. A dog check costs $40.",
    "boarding": "Boarding for a dog costs $45 a night. Boarding for a cat costs $28 a night.",
    "parking": "Parking is free for patients. A dog wash costs $20.",
    "billing": "We accept cash and credit cards. We do not accept personal checks. A dog bath costs $30.",
}


def resolve_all(resolver, turns):
    history, out = [], []
    for t in turns:
        r = resolver.resolve(t, history)
        out.append((r.kind, r.query))
        if r.query:
            history.append(r.query)
    return out


@pytest.fixture
def resolver():
    return Resolver(DOCS, RewriteRules(swap_classes=(("cat", "dog"),)))


def test_pronoun_is_replaced_by_the_earlier_topic(resolver):
    assert resolve_all(resolver, ["Who is doctor Patel?", "Um, when does she work?"]) == [
        ("standalone", "who is doctor patel"), ("pronoun", "when does doctor patel work")]


def test_weak_pronoun_takes_the_topic_and_its_own_weekday_wins(resolver):
    got = resolve_all(resolver, ["what time does the pharmacy open on saturday", "is it open on sunday"])
    # "saturday" gives way to the turn's own "sunday"; the words the turn already says are not repeated; "time"
    # (a word this KB lacks) stays out while "pharmacy" (one it holds) names the topic
    assert got[1] == ("pronoun", "is pharmacy open on sunday")


def test_the_topic_prefers_words_the_kb_holds_over_misheard_ones(resolver):
    # "youtube", "boarding" and "visits" are specific; "youtube" (the recogniser's garbage) is not a KB word
    assert resolve_all(resolver, ["up the youtube boarding visits", "how much is it"])[1] == (
        "pronoun", "how much is boarding visits")
    # a topic of words the KB lacks only ("see", "zebras") is still carried: it is all the caller gave
    assert resolve_all(resolver, ["do you see zebras", "how much is it"])[1] == ("pronoun", "how much is see zebras")


def test_the_topic_keeps_the_compound_of_its_specific_word(resolver):
    # "dog" is in every document (not specific), "wash" in one: the topic is "dog wash", not a bare "wash"
    assert resolve_all(resolver, ["how much is a dog wash", "when can I get it"])[1] == (
        "pronoun", "when can i get dog wash")
    # a common word not next to the specific one stays out ("dog" ... "parking")
    assert resolve_all(resolver, ["does a dog need parking", "where is it"])[1] == ("pronoun", "where is parking")


def test_opener_and_ellipsis_swap_a_contrasted_term(resolver):
    got = resolve_all(resolver, ["how much is boarding for a dog", "and for a cat?", "what about a dog"])
    assert got == [("standalone", "how much is boarding for a dog"), ("opener", "how much is boarding for a cat"),
                   ("opener", "how much is boarding for a dog")]
    # no opener, nothing specific of its own ("how much"): merged with the last topic
    assert resolver.resolve("how much", ["is parking free"]) == Resolution("is parking free how much", "ellipsis",
                                                                          "is parking free")
    # "it" in "does it cost" refers to nothing, but "cost" is in every document: still nothing specific
    assert resolver.resolve("how much does it cost", ["is parking free"]).query == "is parking free how much does it cost"


def test_a_tail_with_its_own_topic_replaces_the_alternatives_it_never_shares_a_sentence_with(resolver):
    # "credit cards" and "personal checks" are never in one KB sentence: alternatives, the new one replaces the old
    assert resolver.resolve("and what about credit cards", ["can i pay with personal checks"]).query == (
        "can i pay with credit cards")
    # "boarding" shares sentences with "night": kept (the tail adds to it); a weekday always stays
    assert resolver.resolve("and for a whole night cat", ["how much is boarding on saturday"]).query == (
        "how much is boarding on saturday a whole night cat")
    # one specific word of its own is not enough to drop the earlier topic: appended
    assert resolver.resolve("what about saturday", ["can i pay with personal checks"]).query == (
        "can i pay with personal checks saturday")


def test_a_follow_up_with_nothing_before_it_is_not_guessed(resolver):
    assert resolver.resolve("what about the saturday").kind == "no_antecedent"
    assert resolver.resolve("and when does she work?").kind == "no_antecedent"
    # "them" always points back, even beside words of the question's own (recogniser's "um can you send them")
    assert resolver.resolve("on any send them to my new doctor").kind == "no_antecedent"
    assert resolver.resolve("can you send them to doctor patel", ["how much are dog pills"]).kind == "pronoun"
    assert resolver.resolve("what about the saturday").query == ""


def test_first_turns_are_questions_not_follow_ups(resolver):
    # an ellipsis or a weak pronoun beside a topic of its own opens a call as a standalone question
    assert resolver.resolve("what time do you open").kind == "standalone"
    assert resolver.resolve("is it free to park").kind == "standalone"
    assert resolver.resolve("is there parking").kind == "standalone"
    assert resolver.resolve("how long does it take to board a dog").kind == "standalone"


def test_a_question_with_its_own_topic_is_not_merged(resolver):
    assert resolver.resolve("do you sell dog pills at the pharmacy", ["who is doctor patel"]).kind == "standalone"
    # a word the KB lacks is the question's own (an entity it does not hold, or a misheard word)
    assert resolver.resolve("do you see rabbits", ["how much is boarding for a dog"]) .query == "do you see rabbits"


def test_a_chain_keeps_the_topic_two_turns_back(resolver):
    got = resolve_all(resolver, ["how much is boarding for a dog", "what about a cat", "is it free"])
    assert got[2] == ("pronoun", "is boarding cat free")


def test_specific_words_come_from_document_frequencies(resolver):
    assert resolver.specific(["pharmacy", "cost", "dog", "patel", "zebra"]) == ["pharmacy", "patel", "zebra"]
    wide = Resolver(DOCS, rules=FollowUpRules(topic_share=1.0))
    assert wide.specific(["cost", "dog"]) == ["cost", "dog"]
    with pytest.raises(ValueError, match="topic_share"):
        FollowUpRules(topic_share=0.0)


def test_params_build_the_rules(params):
    rules = config.follow_up_rules(params)
    assert "she" in rules.pronouns and "them" in rules.pronouns and "it" in rules.weak_pronouns and "is there" in rules.not_referring
    kb = "fixtures/transfer/kb"
    r = Resolver(load_kb(kb), config.rewrite_rules(params, PassageIndex.from_folder(kb).passages), rules)
    # the vet KB contrasts dog and cat prices: "and for a cat" swaps the dog of the earlier question
    assert resolve_all(r, ["how much is boarding for a dog per night", "and for a cat"])[1] == (
        "opener", "how much is boarding for a cat per night")


def test_history_entries_with_no_words_are_no_topic():
    # an earlier turn that resolved to nothing ("", fillers only) is nothing to lean on: skipped, not merged
    r = Resolver(DOCS)
    assert r.resolve("what about sunday", [""]) == Resolution("", "no_antecedent")
    assert r.resolve("when does she work", ["um uh", ""]) == Resolution("", "no_antecedent")
    got = r.resolve("what about sunday", ["when does the pharmacy open on saturday", "", "uh"])
    assert got == Resolution("when does the pharmacy open on sunday", "opener",
                             "when does the pharmacy open on saturday", frozenset({"sunday"}))
