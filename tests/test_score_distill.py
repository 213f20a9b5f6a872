"""Score distillation (issue 14, session 50): the held-out articles that choose the epoch, the teacher's hardest wrong
paragraphs and its cosines as each row's targets, and (marked ``train``: PyTorch) a MiniLM student that keeps the
epoch its held-out questions rank best."""
import numpy as np
import pytest

from rag.train.score_distill import held_out_articles, teacher_rows


class Teacher:
    """Unit vectors looked up by text: the scores below are these vectors' dot products, worked out by hand."""

    VECTORS = {"open": [1.0, 0.0, 0.0], "price": [0.0, 1.0, 0.0],
               "P-hours": [0.8, 0.6, 0.0], "P-flu": [0.0, 0.6, 0.8], "P-park": [0.6, 0.0, 0.8], "P-lab": [0.8, 0.0, 0.6]}

    def embed_queries(self, texts):
        return np.array([self.VECTORS[t] for t in texts], np.float32)

    embed_passages = embed_queries


def test_held_out_articles_are_every_nth_even_article_in_ascending_order():
    passages = [{"article": a} for a in (9, 8, 0, 3, 4, 6, 2, 2, 10)]
    assert held_out_articles(passages, 2) == {0, 4, 8}
    assert held_out_articles(passages, 5) == {0, 10}
    with pytest.raises(ValueError, match="every"):
        held_out_articles(passages, 1)


def test_teacher_rows_add_the_hardest_wrong_paragraphs_and_the_teachers_cosines():
    paragraphs = ["P-hours", "P-flu", "P-park", "P-lab"]
    rows = [{"id": "q1", "query": "open", "positive": "P-hours"}, {"id": "q2", "query": "price", "positive": "P-flu"}]
    out = teacher_rows(rows, paragraphs, Teacher(), 2)
    # "open" = (1, 0, 0): P-hours 0.8 (gold), P-lab 0.8 and P-park 0.6 are the hardest wrong ones, P-flu 0.0 is not
    assert out[0]["negatives"] == ["P-lab", "P-park"] and out[0]["label"] == pytest.approx([0.8, 0.8, 0.6])
    # "price" = (0, 1, 0): gold P-flu 0.6; P-hours 0.6, then P-park and P-lab tie at 0.0: the earlier paragraph first
    assert out[1]["negatives"] == ["P-hours", "P-park"] and out[1]["label"] == pytest.approx([0.6, 0.6, 0.0])
    assert out[0]["id"] == "q1" and rows[0] == {"id": "q1", "query": "open", "positive": "P-hours"}


def test_teacher_rows_refuse_impossible_negative_counts_and_unknown_positives():
    paragraphs = ["P-hours", "P-flu"]
    with pytest.raises(ValueError, match="n_negatives"):
        teacher_rows([{"id": "q1", "query": "open", "positive": "P-hours"}], paragraphs, Teacher(), 2)
    with pytest.raises(ValueError, match="row q9"):
        teacher_rows([{"id": "q9", "query": "open", "positive": "P-park"}], paragraphs, Teacher(), 1)


@pytest.mark.train
def test_a_student_keeps_the_epoch_its_held_out_questions_rank_best(tmp_path):
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator

    from rag.train.finetune import train_score_distill

    paragraphs = {"hours": "The clinic opens at 8 a.m. on weekdays and 9 a.m. on Saturday.",
                  "flu": "A flu shot costs $30 and needs no appointment.",
                  "park": "Parking is free in the lot behind the building.",
                  "lab": "The lab draws blood on weekdays only, from 7 to 11 a.m.",
                  "fax": "Records requests go by fax to the front desk."}
    asked = [("WHAT TIME DO YOU OPEN", "hours"), ("HOW MUCH IS A FLU SHOT", "flu"), ("WHERE CAN I PARK", "park"),
             ("WHEN CAN I GET BLOOD DRAWN", "lab"), ("HOW DO I GET MY RECORDS", "fax")] * 4
    rows = [{"id": f"q{i}", "query": q, "positive": paragraphs[gold],
             "negatives": [paragraphs[k] for k in paragraphs if k != gold][:2], "label": [0.9, 0.7, 0.6]}
            for i, (q, gold) in enumerate(asked)]
    held_out = ({"a": "UM WHEN DO YOU GUYS OPEN", "b": "FLU SHOT PRICE", "c": "IS THERE PARKING"}, paragraphs,
                {"a": {"hours"}, "b": {"flu"}, "c": {"park"}})
    model, history = train_score_distill(rows, 0, held_out, max_epochs=3, batch_size=4, lr=1e-4, max_tokens=32,
                                         threads=1, work_dir=tmp_path)
    scores = [e["mrr@10"] for e in history["epochs"]]
    assert [e["epoch"] for e in history["epochs"]] == [1, 2, 3]
    assert history["best_epoch"] == 1 + scores.index(max(scores))
    again = InformationRetrievalEvaluator(*held_out, name="again", write_csv=False, mrr_at_k=[10])(model)
    assert again["again_cosine_mrr@10"] == pytest.approx(max(scores), abs=1e-4)    # the kept model is the best epoch's
    with pytest.raises(ValueError, match="negatives"):
        train_score_distill(rows[:1] + [{**rows[1], "negatives": rows[1]["negatives"][:1]}], 0, held_out)
