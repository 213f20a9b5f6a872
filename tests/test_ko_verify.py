"""Korean verifier coverage (issue 10, item 3): polarity (아니/않/못/없) and numbers held in ONE cited sentence
with the answer's and the question's key terms."""
import pytest

from rag.ko.answer import (ABSTAIN, ShareSupport, decide_ko, is_negative_ko, numbers_ko, polarity_agrees, question_share,
                           sentence_support,
                           score_rows, verify_ko)

NEG_DRUG = "이 약은 임산부가 복용할 수 없다."
POS_DRUG = "이 약은 임산부도 복용할 수 있다."


@pytest.mark.parametrize("cited, answer, expected", [
    (NEG_DRUG, "복용할 수 있다", (False, "polarity")),
    (NEG_DRUG, "복용할 수 없다", (True, "supported")),
    (NEG_DRUG, "임산부는 복용할 수 있습니다", (False, "polarity")),
    (POS_DRUG, "임산부는 복용할 수 없다", (False, "polarity")),
    (POS_DRUG, "임산부도 복용할 수 있다", (True, "supported")),
    ("그는 회의에 참석하지 않았다.", "그는 회의에 참석했다", (False, "polarity")),        # 않 (VX)
    ("그는 회의에 참석하지 않았다.", "회의에 참석하지 않았다", (True, "supported")),
    ("그는 회의에 참석했다.", "회의에 참석하지 않았다", (False, "polarity")),
    ("비행기는 폭설로 이륙하지 못했다.", "비행기는 이륙했다", (False, "polarity")),      # 못하 (VX)
    ("비행기는 폭설로 이륙하지 못했다.", "폭설로 이륙하지 못했다", (True, "supported")),
    ("고래는 어류가 아니다.", "고래는 어류이다", (False, "polarity")),                   # 아니 (VCN)
    ("고래는 어류가 아니다.", "어류가 아니다", (True, "supported")),
    ("그는 그날 학교에 안 갔다.", "그날 학교에 갔다", (False, "polarity")),              # 안 (MAG)
    ("그는 그날 학교에 안 갔다.", "학교에 안 갔다", (True, "supported")),
])
def test_polarity_pairs(cited, answer, expected):
    assert verify_ko(answer, ["1"], [cited]) == expected


def test_a_noun_span_carries_no_polarity():
    # KorQuAD answers are spans: "임산부" is what the negative sentence is about, not a positive claim.
    assert verify_ko("임산부", ["1"], [NEG_DRUG]) == (True, "supported")
    assert polarity_agrees("임산부", [NEG_DRUG]) is True
    assert polarity_agrees("복용할 수 있다", [NEG_DRUG]) is False


def test_polarity_uses_the_sentence_sharing_most_terms():
    passage = "어린이는 이 약을 복용할 수 있다. " + NEG_DRUG
    assert verify_ko("임산부는 복용할 수 있다", ["1"], [passage]) == (False, "polarity")
    assert verify_ko("어린이는 복용할 수 있다", ["1"], [passage]) == (True, "supported")


@pytest.mark.parametrize("text, negative", [
    ("이 약은 임산부가 복용할 수 없다.", True), ("그는 가지 않았다", True), ("가지 못했다", True),
    ("학생이 아니다", True), ("복용하지 마십시오", True), ("아니요", True), ("그는 안 갔다", True),
    ("집 안에 있다", False),            # 안 "inside" is a noun
    ("관계없이 간다", False),           # 관계없이 "regardless" is one adverb
    ("서울은 대한민국의 수도이다.", False),
])
def test_negation_morphemes(text, negative):
    assert is_negative_ko(text) is negative


SPLIT = "삼일운동은 일제강점기의 독립운동이다. 1919년에 대한민국 임시정부가 수립되었다."   # year and topic apart
TOGETHER = "삼일운동은 1919년에 일어난 독립운동이다. 대한민국 임시정부는 같은 해 4월에 수립되었다."
WHEN = "삼일운동이 일어난 해는?"


def test_number_in_another_sentence_than_the_question_terms_fails():
    assert verify_ko("1919년", ["1"], [SPLIT], WHEN) == (False, "number_not_with_terms")
    assert verify_ko("1919년", ["1"], [TOGETHER], WHEN) == (True, "supported")


def test_number_in_another_sentence_than_the_answer_terms_fails():
    assert verify_ko("삼일운동은 1919년", ["1"], [SPLIT]) == (False, "number_not_with_terms")
    assert verify_ko("삼일운동은 1919년", ["1"], [TOGETHER]) == (True, "supported")
    # Without a question a bare span has no topic to check: 1919 and 년 are in one sentence.
    assert verify_ko("1919년", ["1"], [SPLIT]) == (True, "supported")


def test_numbers_of_one_answer_must_share_a_sentence():
    assert verify_ko("1919년 4월", ["1"], [TOGETHER]) == (False, "number_not_with_terms")


def test_numbers_compare_as_numbers_not_substrings():
    # The terms check finds "192" inside "1920"; the number check does not.
    assert verify_ko("192년", ["1"], ["임시정부는 1920년에 이전하였다."]) == (False, "number_not_in_cited")
    assert verify_ko("1,947미터", ["1"], ["한라산의 높이는 1,947미터이다."]) == (True, "supported")
    assert sentence_support("1947미터", ["한라산의 높이는 1,947미터이다."]) is None     # thousands comma
    assert numbers_ko("1,947미터, 3.5%, 2010-09-28") == {"1947", "3.5", "2010", "9", "28"}


def test_sentence_support_question_share():
    # question terms: 삼일운동, 일어나, 해 (3); the 1919 sentence of SPLIT holds none of them
    assert question_share(WHEN, "1919년에 대한민국 임시정부가 수립되었다.") == (0, 0.0)
    assert sentence_support("1919년", [SPLIT], WHEN) == "number_not_with_terms"
    assert sentence_support("1919년", [SPLIT], WHEN, support=ShareSupport(0.0)) == "number_not_with_terms"  # still >= 1
    assert sentence_support("1919년", [TOGETHER], WHEN) is None
    assert sentence_support("서울", [SPLIT], WHEN) == "not_with_question_terms"    # no number: the same test


# A span answer without numbers: 멜론 is in the passage, but in a sentence about another service
APP = "멜론은 음원 서비스이다. 이 쇼케이스는 유튜브를 통해 최초로 공개되었다."
SHOWCASE = "쇼케이스가 최초로 공개된 사이트는?"   # terms: 쇼케이스, 최초, 공개, 사이트 (4)


def test_a_span_from_a_sentence_about_something_else_fails():
    assert question_share(SHOWCASE, "멜론은 음원 서비스이다.") == (0, 0.0)
    assert question_share(SHOWCASE, "이 쇼케이스는 유튜브를 통해 최초로 공개되었다.") == (3, 0.75)
    assert verify_ko("멜론", ["1"], [APP], SHOWCASE) == (False, "not_with_question_terms")
    assert verify_ko("유튜브", ["1"], [APP], SHOWCASE) == (True, "supported")
    assert verify_ko("유튜브", ["1"], [APP], SHOWCASE, support=ShareSupport(0.8)) == (False, "not_with_question_terms")
    d = decide_ko(SHOWCASE, "멜론", ["1"], [APP])
    assert (d["say"], d["status"], d["reason"]) == ("이 쇼케이스는 유튜브를 통해 최초로 공개되었다.", "extractive",
                                                  "not_with_question_terms")


def test_the_fallback_abstains_when_no_sentence_holds_enough_of_the_question():
    # gold excluded: the passage shares only 쇼케이스 (1 of 4 terms) with the question
    other = ["이 쇼케이스는 서울에서 열렸다."]
    d = decide_ko(SHOWCASE, "서울", ["1"], other)
    assert (d["say"], d["status"], d["reason"]) == (ABSTAIN, "fallback_abstained", "not_with_question_terms")
    d = decide_ko(SHOWCASE, "서울", ["1"], other, support=ShareSupport(0.25))   # 1 of 4 is enough at 0.25
    assert (d["say"], d["status"], d["reason"]) == ("서울", "llm", "supported")


def test_decide_replaces_a_number_from_the_wrong_sentence():
    # the fallback's best sentence holds 삼일, 운동 of 삼일, 운동, 일어나, 해 (0.5 < 0.6): it does not say when either
    d = decide_ko(WHEN, "1919년", ["1"], [SPLIT])
    assert d == {"say": ABSTAIN, "citations": ["none"], "status": "fallback_abstained",
                 "reason": "number_not_with_terms"}
    d = decide_ko(WHEN, "1919년", ["1"], [SPLIT], support=ShareSupport(0.5))
    assert d == {"say": "삼일운동은 일제강점기의 독립운동이다.", "citations": ["1"], "status": "extractive",
                 "reason": "number_not_with_terms"}
    assert decide_ko(WHEN, "1919년", ["1"], [TOGETHER])["status"] == "llm"
    assert decide_ko("이 약을 임산부가 복용할 수 있나요?", "복용할 수 있다", ["1"], [NEG_DRUG]) == {
        "say": NEG_DRUG, "citations": ["1"], "status": "extractive", "reason": "polarity"}


def test_score_rows_reads_the_new_reasons():
    def row(answer, passages, golds):
        cits = ["none"] if answer == ABSTAIN else ["1"]
        final = decide_ko(WHEN, answer, cits, passages)
        return {"k": 1, "gold_excluded": False, "golds": golds, "passages": passages, "raw_answer": answer,
                "raw_citations": cits, "error": None, "final": final}

    m = score_rows([row("1919년", [SPLIT], ["1919년"]), row("1919년", [TOGETHER], ["1919년"]),
                    row(ABSTAIN, [SPLIT], ["1919년"])])
    assert m["final_status"] == {"fallback_abstained": 1, "llm": 1, "abstained": 1}
    assert (m["raw"]["span_match"], m["final"]["span_match"]) == (2, 1)
    assert m["final"]["hallucinated"] == 0


def test_choose_question_share_maximises_youden_j_by_hand():
    from rag.ko.answer import choose_question_share

    supported, unsupported = [1.0, 0.75, 0.5, 0.5], [0.5, 0.25, 0.25, 0.0]
    value, table = choose_question_share(supported, unsupported, [0.5, 0.0, 0.75])
    # 0.0: 1 - 1 = 0; 0.5: 1 - 0.25 = 0.75; 0.75: 0.5 - 0 = 0.5
    assert value == 0.5
    assert [(r["min_question_share"], r["supported_kept"], r["unsupported_kept"], r["j"]) for r in table] == [
        (0.0, 1.0, 1.0, 0.0), (0.5, 1.0, 0.25, 0.75), (0.75, 0.5, 0.0, 0.5)]
    assert choose_question_share([1.0], [0.0], [0.2, 0.4])[0] == 0.2          # a tie keeps the lower value
    with pytest.raises(ValueError):
        choose_question_share([], [0.1], [0.5])
