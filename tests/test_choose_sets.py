"""Stage selection's choice of a learned design's min_score on the two choose KBs (stages/selection_sets.py): the
utility counts right answers said, minus grounded-but-wrong sentences and near misses said, on the choose sets only."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "stages"))
from selection_sets import CHOOSE_SETS, REPORT_SETS, choose_utility, min_score_on_choose_sets  # noqa: E402


def _runs():
    qs = lambda answerable, n: [{"answerable": i < answerable} for i in range(n)]  # noqa: E731
    return {"clinic": ("clinic", {}, qs(14, 16)), "near_miss_clinic_asr": ("clinic", {}, qs(0, 34)),
            "dental": ("dental", {}, qs(27, 33)), "near_miss_dental_asr": ("dental", {}, qs(0, 30))}


def _said(clinic, dental, near_clinic, near_dental):
    return {"clinic": {"factual_accuracy": clinic[0], "grounded_wrong_said": clinic[1]},
            "near_miss_clinic_asr": {"said": near_clinic},
            "dental": {"factual_accuracy": dental[0], "grounded_wrong_said": dental[1]},
            "near_miss_dental_asr": {"said": near_dental},
            "vet_clean": {"factual_accuracy": 1.0, "grounded_wrong_said": 0, "said": 99}}


def test_utility_counts_right_minus_wrong_minus_near_misses_said_on_the_choose_sets_only():
    # the mlp rows of 2026-12-05 at its fitted 0.437: clinic 5 of 14 right, dental 7 of 27, one clinic near miss said
    assert choose_utility(_said((0.357143, 0), (0.259259, 0), 1, 0), _runs()) == 5 + 7 - 1
    # the rules pick: 12 of 14 / 20 of 27 right, 0 / 5 wrong, 26 / 11 near misses said
    assert choose_utility(_said((0.857143, 0), (0.740741, 5), 26, 11), _runs()) == 12 + 20 - 5 - 26 - 11
    assert set(CHOOSE_SETS).isdisjoint(REPORT_SETS) and not any(n.startswith("vet") for n in CHOOSE_SETS)


def test_the_best_min_score_wins_and_a_tie_goes_to_the_lower_value():
    by_t = {"0.30": _said((0.714286, 0), (0.444444, 3), 1, 3),   # 10 + 12 - 3 - 1 - 3 = 15
            "0.40": _said((0.428571, 0), (0.407407, 2), 0, 0),   # 6 + 11 - 2 = 15
            "0.50": _said((0.285714, 0), (0.222222, 0), 0, 0)}   # 4 + 6 = 10
    best, u = min_score_on_choose_sets(by_t, _runs())
    assert u == {"0.30": 15, "0.40": 15, "0.50": 10} and best == "0.30"
    by_t["0.50"] = _said((0.357143, 0), (0.259259, 0), 0, 0)     # 5 + 7 = 12 < 15
    assert min_score_on_choose_sets(by_t, _runs())[0] == "0.30"
