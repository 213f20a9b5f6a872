"""rag.voice.abstain: hand-computed signals on a toy index (hand-set vectors, no embedder), AUROC and
refusal precision/recall on tiny lists, and the combined model's training rows."""
import numpy as np
import pytest

from rag.voice import abstain
from rag.retrieval.chunk import Passage
from rag.retrieval.search import PassageIndex

E = np.eye(4, dtype=np.float32)
LABELS = {"a": True, "b": True, "c": False, "d": False}


@pytest.fixture
def toy():
    """Five passages of four docs; hours#2 has cosine 0.8 with hours#1's direction."""
    passages = [Passage("hours#1", "hours", "We are open on Saturday."),
                Passage("hours#2", "hours", "Closed on Sunday."),
                Passage("refills#1", "refills", "Refills take 3 business days to process."),
                Passage("billing#1", "billing", "We accept cards."),
                Passage("labs#1", "labs", "Lab results are ready soon.")]
    vectors = np.stack([E[0], np.array([0.8, 0.6, 0, 0], np.float32), E[1], E[2], E[3]])
    return PassageIndex(passages, vectors)


def test_auroc_hand_computed():
    # pairs (answerable, unanswerable): (.9,.6) (.9,.1) (.4,.1) won, (.4,.6) lost -> 3/4
    assert abstain.auroc({"a": 0.9, "b": 0.4, "c": 0.6, "d": 0.1}, LABELS) == 0.75
    assert abstain.auroc({"a": 0.5, "c": 0.5}, LABELS) == 0.5  # a tie counts 1/2


def test_refusal_precision_recall_at_tau():
    r = abstain.refusal_metrics({"a": 0.9, "b": 0.4, "c": 0.6, "d": 0.1}, LABELS, tau=0.5)
    # refused b (answerable) and d (unanswerable): P = 1/2; unanswerable c, d, one refused: R = 1/2
    assert r == {"precision": 0.5, "recall": 0.5, "refused": 2, "answerable_refused": ["b"],
                 "unanswerable_answered": ["c"]}
    none = abstain.refusal_metrics({"a": 0.9, "c": 0.6}, LABELS, tau=0.5)
    assert (none["precision"], none["recall"], none["refused"]) == (1.0, 0.0, 0)
    assert abstain.refusal_metrics({"c": 0.6}, LABELS, tau=0.6)["recall"] == 0.0  # score == tau answers


def test_coverage_of_content_words():
    stop = {"how", "much", "is", "a"}
    assert abstain.coverage_of("How much is a flu shot?", "A flu shot costs $30.", stop) == 1.0
    assert abstain.coverage_of("flu shot price", "A flu shot costs $30.", stop) == pytest.approx(2 / 3)
    assert abstain.coverage_of("how much is a", "anything", stop) == 0.0  # no content word


def test_signals_on_toy_index(toy):
    q, v = "refills saturday", E[0]
    assert abstain.top1(toy, q, v) == pytest.approx(1.0)
    # top passage hours#1 holds "saturday", not "refills"
    assert abstain.coverage(toy, q, v) == 0.5
    # dense docs: hours, then refills, billing (cosine 0, index order); BM25: hours, refills -> 2/3
    assert abstain.agreement(toy, q, v) == pytest.approx(2 / 3)
    # documents, not passages: hours (1.0) vs refills (0.0); hours#2 (0.8) is the same document
    assert abstain.margin(toy, q, v) == pytest.approx(1.0)
    assert abstain.margin(toy, "x", np.array([0, 0, 0.6, 0.8], np.float32)) == pytest.approx(0.2)
    # hours#1 first in dense and in BM25 (shorter passage than refills#1): 1/61 + 1/61
    assert abstain.hybrid(toy, q, v) == pytest.approx(2 / 61)


def test_combined_fitted_only_on_given_rows():
    rows = [dict(top1=t, agreement=1.0, coverage=t, margin=0.1, hybrid=0.03) for t in (0.2, 0.4, 0.6, 0.8)]
    model = abstain.fit_combined(rows, [False, False, True, True])
    assert model.mean[0] == pytest.approx(0.5)  # (0.2 + 0.4 + 0.6 + 0.8) / 4
    assert model.scale[1] == 1.0                # a constant column: sklearn's scale 1, not a division by 0
    p = model.predict({"lo": rows[0], "hi": rows[3]})
    assert p["hi"] > 0.5 > p["lo"]
    again = abstain.fit_combined(rows, [False, False, True, True])
    assert again.predict({"lo": rows[0]}) == {"lo": p["lo"]}  # deterministic
    assert abstain.CombinedModel.from_dict(model.to_dict()) == model  # ships as JSON unchanged


def test_combined_model_matches_sklearn():
    """The numpy forward pass of the shipped model equals sklearn's predict_proba on the same fit."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(0)
    rows = [dict(zip(abstain.SIGNALS, rng.random(5))) for _ in range(12)]
    labels = [bool(i % 2) for i in range(12)]
    X = np.array([[r[s] for s in abstain.SIGNALS] for r in rows])
    ref = make_pipeline(StandardScaler(), LogisticRegression(random_state=0)).fit(X, labels).predict_proba(X)[:, 1]
    ours = abstain.fit_combined(rows, labels).predict(dict(enumerate(rows)))
    assert [ours[i] for i in range(12)] == pytest.approx(list(ref), abs=1e-12)


def test_pick_signal_judges_only_named_sets():
    good = {"precision": 1.0, "recall": 1.0, "answerable_refused": [], "auroc": 1.0}
    bad = {"precision": 0.5, "recall": 0.5, "answerable_refused": ["x", "y"], "auroc": 0.6}
    results = {"top1": {"fit": good, "tr": bad}, "coverage": {"fit": bad, "tr": good}}
    goal = {"precision": 0.9, "recall": 0.9, "max_answerable_refused": 1}
    assert abstain.pick_signal(results, ["tr"], goal) == "coverage"
    assert abstain.pick_signal(results, ["fit"], goal) == "top1"


def test_signal_scores_picks_a_column_and_rejects_unknown():
    rows = {"a": dict(top1=0.7, agreement=1.0, coverage=0.5, margin=0.1, hybrid=0.03)}
    assert abstain.signal_scores("coverage", rows) == {"a": 0.5}
    with pytest.raises(ValueError, match="needs a model"):
        abstain.signal_scores("combined", rows)
    with pytest.raises(ValueError, match="unknown abstention signal"):
        abstain.signal_scores("bogus", rows)
