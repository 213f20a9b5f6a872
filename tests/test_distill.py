"""The 6-layer e5 student (issue 14): teaching texts only from HeySQuAD's training half, length-sorted batches that use
every text once, words dropped as teaching noise, and (marked ``train``: PyTorch) a student that moves towards its
teacher's vectors and keeps the epoch of least validation distance."""
import random

import numpy as np
import pytest

from rag.retrieval.e5 import QUERY, E5Tokenizer, read_e5
from rag.train.distill import dropped_words, length_batches, teaching_texts


def test_length_batches_use_every_index_once_and_group_similar_lengths():
    lengths = [random.Random(1).randrange(5, 500) for _ in range(300)]
    batches = length_batches(lengths, batch_size=16, seed=0, pool=4)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(300)) and max(len(b) for b in batches) == 16
    spread = np.mean([max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches])
    assert spread < 100   # random batches of 16 from 5..500 spread ~440
    assert batches == length_batches(lengths, 16, 0, 4) and batches != length_batches(lengths, 16, 1, 4)
    with pytest.raises(ValueError):
        length_batches(lengths, 0, 0)


def test_dropped_words_keep_order_and_at_least_one_word():
    rng = random.Random(0)
    text = "what time does the clinic open on saturday"
    assert dropped_words(text, 0.0, rng) == text
    out = dropped_words(text, 0.5, random.Random(3))
    assert 0 < len(out.split()) < 8 and [w for w in text.split() if w in out.split()] == out.split()
    assert dropped_words("one", 0.99, rng) == "one"
    with pytest.raises(ValueError, match="drop rate"):
        dropped_words(text, 1.0, rng)


def test_teaching_texts_hold_no_text_of_an_odd_article_and_hold_out_whole_articles():
    passages = [{"_id": f"{a}_0", "article": a, "text": f"Article {a} has a fact. It has another fact {a}."}
                for a in range(10)]
    queries = [{"id": f"q{a}", "relevant": [f"{a}_0"], "typed": f"Typed question {a}?", "human": f"human question {a}",
                "machine": f"machine question {a}"} for a in range(10)]
    t = teaching_texts(passages, queries, drop_rate=0.3, seed=0, val_every=2)
    everything = " ".join(x for part in t.values() for role in part.values() for x in role)
    for odd in (1, 3, 5, 7, 9):
        assert f"{odd}" not in everything
    # even articles 0, 2, 4, 6, 8: every 2nd from the first (0, 4, 8) is held out
    val = " ".join(t["val"]["queries"] + t["val"]["passages"])
    train = " ".join(t["train"]["queries"] + t["train"]["passages"])
    assert all(f"{a}" in val and f"{a}" not in train for a in (0, 4, 8))
    assert all(f"{a}" in train for a in (2, 6))
    assert {"Typed question 2?", "human question 2", "machine question 2", "It has another fact 2."} <= set(
        t["train"]["queries"])
    assert "Article 2 has a fact. It has another fact 2." in t["train"]["passages"]
    with pytest.raises(KeyError, match="q9"):
        teaching_texts(passages[:9], queries, 0.3, 0)


TOPICS = ["harbour", "castle", "river", "bridge", "market", "garden", "museum", "station", "library", "tower", "school",
          "forest"]   # 8 teach, 4 validate (the two `train` tests below)


@pytest.mark.train
def test_a_student_moves_towards_its_teacher_and_keeps_its_best_epoch():
    from rag.train.distill import distill
    from rag.train.e5 import bert_from_e5, embeddings_numpy

    e5 = read_e5()
    tok = E5Tokenizer(e5)
    texts = [QUERY + f"when was the {t} of the old town built" for t in TOPICS]
    teacher = embeddings_numpy(bert_from_e5(e5), tok, texts, 32)    # the whole model teaches its 2-layer cut
    model, history = distill(e5, [0, 11], texts[:8], teacher[:8], texts[8:], teacher[8:], seed=0, max_epochs=3,
                             batch_size=4, lr=1e-4, warmup_ratio=0.0, threads=1, max_tokens=32)
    distances = [e["val_distance"] for e in history["epochs"]]
    assert min(distances) < history["val_distance_before"]
    assert history["best_epoch"] == 1 + distances.index(min(distances))
    after = embeddings_numpy(model, tok, texts[8:], 32)
    assert abs(float((1 - (after * teacher[8:]).sum(1)).mean()) - min(distances)) < 1e-4


def test_distill_seeds_name_an_unknown_side():
    from rag.train.distill import distill_seeds

    with pytest.raises(ValueError, match="side must be 'both' or 'queries'"):
        distill_seeds(None, None, {}, {"side": "passages"}, None, "test")


@pytest.mark.train
def test_a_query_student_learns_how_its_teacher_ranks_fixed_passages():
    from rag.retrieval.e5 import PASSAGE
    from rag.train.distill import distill
    from rag.train.e5 import bert_from_e5, embeddings_numpy

    e5 = read_e5()
    tok = E5Tokenizer(e5)
    whole = bert_from_e5(e5)
    texts = [QUERY + f"when was the {t} built" for t in TOPICS]
    queries = embeddings_numpy(whole, tok, texts, 32)
    passages = embeddings_numpy(whole, tok, [PASSAGE + f"The {t} was built in {1700 + 9 * i}." for i, t in
                                             enumerate(TOPICS)], 32)

    def agreement(model):   # how often the student's query ranks the teacher's passages as the teacher does, top 1
        student = embeddings_numpy(model, tok, texts[8:], 32)
        return float(np.mean((student @ passages.T).argmax(1) == (queries[8:] @ passages.T).argmax(1)))

    model, history = distill(e5, [0, 11], texts[:8], queries[:8], texts[8:], queries[8:], seed=0, max_epochs=3,
                             batch_size=4, lr=1e-4, warmup_ratio=0.0, threads=1, max_tokens=32,
                             passage_targets=passages)
    distances = [e["val_distance"] for e in history["epochs"]]
    assert min(distances) < history["val_distance_before"]
    assert history["best_epoch"] == 1 + distances.index(min(distances))
    assert agreement(model) >= agreement(bert_from_e5(e5, [0, 11]))


@pytest.mark.train
def test_a_cut_can_start_from_an_exported_fine_tunes_own_weights(tmp_path):
    import torch

    from rag.train.e5 import bert_from_e5, embeddings_numpy, export_onnx
    from rag.train.finetune import half_weights

    e5 = read_e5()
    tok = E5Tokenizer(e5)
    tuned = bert_from_e5(e5)   # a stand-in fine-tune: every weight but the word table moved by seeded noise
    torch.manual_seed(0)
    with torch.no_grad():
        for name, w in tuned.named_parameters():
            if "word_embeddings" not in name:
                w.add_(0.02 * torch.randn_like(w))
    export_onnx(tuned, tmp_path / "tuned.onnx")
    half_weights(tmp_path / "tuned.onnx", tmp_path / "tuned.half.onnx")
    texts = [QUERY + f"when was the {t} built" for t in TOPICS[:4]]
    packaged = embeddings_numpy(bert_from_e5(e5), tok, texts, 32)
    for start, least in (("tuned.onnx", 0.99999), ("tuned.half.onnx", 0.999)):   # float16-stored weights round
        again = embeddings_numpy(bert_from_e5(e5, start=tmp_path / start), tok, texts, 32)
        want = embeddings_numpy(tuned, tok, texts, 32)
        assert (again * want).sum(1).min() > least
        assert (packaged * want).sum(1).max() < 0.999        # so the start weights are the fine-tune's, not e5's
    tuned.encoder.layer = torch.nn.ModuleList(tuned.encoder.layer[i] for i in (0, 5, 11))
    cut = embeddings_numpy(bert_from_e5(e5, [0, 5, 11], tmp_path / "tuned.onnx"), tok, texts, 32)
    assert (cut * embeddings_numpy(tuned, tok, texts, 32)).sum(1).min() > 0.99999
    export_onnx(tuned, tmp_path / "three_layers.onnx")    # 3 layers cannot start a 12-layer model
    with pytest.raises(KeyError, match=r"three_layers.onnx: weights not matched: missing \[.encoder.layer.10"):
        bert_from_e5(e5, start=tmp_path / "three_layers.onnx")
