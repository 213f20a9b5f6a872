"""Verifier coverage (issue 10, item 3): English negation cues (contractions, negative pronouns, phrases,
listed antonyms) and bare yes/no replies checked against the query's key terms, on the clinic KB."""
import pytest

from conftest import ROOT
from rag.retrieval.chunk import load_kb
from rag.voice.verify import VerifyRules, is_negative, is_yes_no, verify, yes_no_supported

# (negative answer, positive sentence): each pair differs in polarity only.
PAIRS = [
    ("We haven't received your referral.", "We have received your referral."),
    ("The lab hasn't sent the results.", "The lab has sent the results."),
    ("The refill wasn't approved.", "The refill was approved."),
    ("The forms weren't mailed.", "The forms were mailed."),
    ("The pharmacy didn't send the refill.", "The pharmacy sent the refill."),
    ("Patients shouldn't eat before a blood test.", "Patients should eat before a blood test."),
    ("The nurse couldn't reach your doctor.", "The nurse could reach your doctor."),
    ("The pharmacy wouldn't fill the prescription.", "The pharmacy would fill the prescription."),
    ("Video visits aren't billed to Medicare.", "Video visits are billed to Medicare."),
    ("Nobody answers the phone on weekends.", "Staff answer the phone on weekends."),
    ("None of our doctors speak Spanish.", "All of our doctors speak Spanish."),
    ("Neither Aetna nor Cigna plans are accepted.", "Aetna and Cigna plans are accepted."),
    ("Nothing is charged for parking.", "A fee is charged for parking."),
    ("We no longer take walk-in patients.", "We still take walk-in patients."),
    ("We stopped offering covid vaccines.", "We started offering covid vaccines."),
    ("You can get a flu shot without an appointment.", "You can get a flu shot with an appointment."),
    ("Dr Patel is out of network for Cigna.", "Dr Patel is in network for Cigna."),
    ("We are unable to refill controlled medicines by phone.", "We are able to refill controlled medicines by phone."),
    ("Children are ineligible for video visits.", "Children are eligible for video visits."),
    ("Dr Patel is unavailable on Friday.", "Dr Patel is available on Friday."),
    ("Your portal account is inactive.", "Your portal account is active."),
    ("Cosmetic procedures are uncovered by your plan.", "Cosmetic procedures are covered by your plan."),
    ("Your old insurance card is invalid.", "Your old insurance card is valid."),
    ("The deposit is non-refundable.", "The deposit is refundable."),
    ("The deposit is nonrefundable.", "The deposit is refundable."),
]
IDS = [neg.split()[1] if neg.split()[0] in ("We", "The", "You") else neg.split()[0] for neg, _ in PAIRS]


def kb_of(neg, pos):
    return {"kb-neg": f"# Neg\n\n{neg}", "kb-pos": f"# Pos\n\n{pos}"}


@pytest.mark.parametrize("neg, pos", PAIRS, ids=IDS)
def test_negative_answer_against_positive_sentence_fails(neg, pos):
    kb = kb_of(neg, pos)
    assert is_negative(neg) is True and is_negative(pos) is False
    assert verify(neg, "kb-pos", list(kb), kb) == (False, "polarity")
    assert verify(pos, "kb-neg", list(kb), kb) == (False, "polarity")


@pytest.mark.parametrize("neg, pos", PAIRS, ids=IDS)
def test_agreeing_pairs_pass(neg, pos):
    kb = kb_of(neg, pos)
    assert verify(neg, "kb-neg", list(kb), kb) == (True, "ok")
    assert verify(pos, "kb-pos", list(kb), kb) == (True, "ok")


@pytest.mark.parametrize("answer, sentence", [
    ("We have not received your referral.", "We haven't received your referral."),
    ("The refill was not approved.", "The refill wasn't approved."),
    ("We do not take walk-in patients.", "We no longer take walk-in patients."),
    ("Children cannot have video visits.", "Children are ineligible for video visits."),
])
def test_different_negation_forms_agree(answer, sentence):
    kb = {"kb-x": f"# X\n\n{sentence}"}
    assert verify(answer, "kb-x", ["kb-x"], kb) == (True, "ok")


def test_a_word_the_sentence_does_not_say_is_unsupported():
    # since 2026-12-02 every content word must be in the supporting sentence: "anymore" is not in "We no longer
    # take walk-in patients." (this pair passed before; the extractive sentence is said instead)
    kb = {"kb-x": "# X\n\nWe no longer take walk-in patients."}
    assert verify("We do not take walk-in patients anymore.", "kb-x", ["kb-x"], kb) == (False, "unsupported_words")


@pytest.mark.parametrize("text", [
    "Parking is under the building.", "Unit 4 is open until 6 p.m.", "Bring your insurance information.",
    "Payment plans include interest.", "Please wait inside.", "A nonstop shuttle runs to the garage.",
    "Out of hours calls go to the nurse line.", "The network is fast.", "Know your options.",
    "We understand.", "Nonetheless we are open.",
])
def test_no_prefix_or_partial_match_fires(text):
    assert is_negative(text) is False


def test_phrases_match_consecutive_whole_words():
    rules = VerifyRules(negations=("out of network", "no longer"))
    assert is_negative("Dr Lee is out-of-network.", rules) is True      # hyphens split into words
    assert is_negative("We no longer draw blood.", rules) is True
    assert is_negative("out of the network", rules) is False
    assert is_negative("We are out of masks. The network is down.", rules) is False
    assert is_negative("no", rules) is False                            # only the phrase is a cue here


def test_negation_cues_must_be_words():
    with pytest.raises(ValueError, match="verify.negations must be words or phrases"):
        VerifyRules(negations=("not", "--"))


# Bare yes/no replies, on the real clinic KB (fixtures/voice/kb).
KB = load_kb(ROOT / "fixtures" / "voice" / "kb")
ALL = list(KB)
CHECKS = "do you take personal checks"


def test_fixture_text_the_cases_rely_on():
    assert "We do not accept personal checks." in KB["kb-billing"]
    assert "Parking in the clinic lot is free for patients." in KB["kb-parking"]
    assert "checks" not in KB["kb-parking"]


def test_yes_citing_a_document_without_the_question_terms_fails():
    # Before: ok (a bare "Yes." has no content words, so the coverage check passed vacuously).
    assert verify("Yes.", "kb-parking", ALL, KB, CHECKS) == (False, "yes_no_unsupported")


def test_no_citing_the_billing_sentence_passes():
    assert verify("No.", "kb-billing", ALL, KB, CHECKS) == (True, "ok")
    assert verify("No, we don't.", "kb-billing", ALL, KB, CHECKS) == (True, "ok")


def test_yes_against_the_negative_billing_sentence_is_polarity():
    assert verify("Yes.", "kb-billing", ALL, KB, CHECKS) == (False, "polarity")
    assert verify("Yes, we do.", "kb-billing", ALL, KB, CHECKS) == (False, "polarity")


def test_yes_is_right_when_the_sentence_holds_the_question():
    assert verify("Yes.", "kb-parking", ALL, KB, "is parking free for patients") == (True, "ok")
    assert verify("No.", "kb-parking", ALL, KB, "is parking free for patients") == (False, "polarity")


def test_yes_no_polarity_follows_a_negative_question():
    # "Yes" to "are you closed on sunday" says "we are closed": negative, as "We are closed on Sunday."
    assert verify("Yes.", "kb-hours", ALL, KB, "are you closed on sunday") == (True, "ok")
    assert verify("No.", "kb-hours", ALL, KB, "are you closed on sunday") == (False, "polarity")
    q = "can i get a flu shot without an appointment"         # "You do not need an appointment for a flu shot."
    assert verify("Yes.", "kb-walkins", ALL, KB, q) == (True, "ok")
    assert verify("No.", "kb-walkins", ALL, KB, q) == (False, "polarity")


def test_yes_without_a_query_is_unsupported():
    assert verify("Yes.", "kb-billing", ALL, KB) == (False, "yes_no_unsupported")
    assert verify("Yes.", "kb-billing", ALL, KB, "is it") == (False, "yes_no_unsupported")   # no content word


def test_yes_no_detection():
    assert is_yes_no("Yes.") and is_yes_no("No.") and is_yes_no("No, we don't.") and is_yes_no("Yes, we are.")
    assert not is_yes_no("Yes, parking is free.")
    assert not is_yes_no("We do not accept personal checks.")
    assert not is_yes_no("")


def test_yes_no_support_share():
    # key terms of the question: take, personal, check (stemmed); 2 of 3 in the billing sentence
    assert yes_no_supported(CHECKS, "We do not accept personal checks.") is True
    assert yes_no_supported(CHECKS, "We accept personal cards.") is False            # 1 of 3 < 0.5
    assert yes_no_supported(CHECKS, "Parking in the clinic lot is free for patients.") is False
    assert yes_no_supported(None, "We do not accept personal checks.") is False


def test_answers_with_content_keep_the_coverage_rule():
    assert verify("Yes, parking is free for patients.", "kb-parking", ALL, KB, "is parking free") == (True, "ok")
    assert verify("Yes, we accept personal checks.", "kb-billing", ALL, KB, CHECKS) == (False, "polarity")
    assert verify("Yes, we take checks.", "kb-parking", ALL, KB, CHECKS) == (False, "no_supporting_sentence")


@pytest.mark.parametrize("answer", ["...", "?!", "Oh.", "\U0001F600"])
def test_an_answer_with_nothing_in_it_is_empty(answer):
    kb = {"d": "We are open from 9 a.m. to 5 p.m. on weekdays."}
    assert verify(answer, "d", ["d"], kb, "when do you open") == (False, "empty_answer")
