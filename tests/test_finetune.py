"""Fine-tuned retriever (issue 14): training pairs never touch the report half, the embedder loads another ONNX
only with its sha256, and the committed fine-tuned model serves without PyTorch. The export itself (torch vs
onnxruntime) needs the .[train] extra: marked ``train``, run by ``make test-train``."""
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from rag.retrieval.embed import MiniLMEmbedder
from rag.bench.heysquad import article_split, train_folds
from rag.train.pairs import answer_sentence_pairs, training_pairs

ROOT = Path(__file__).resolve().parent.parent
PASSAGES = [{"_id": "0_0", "article": 0, "text": "Warsaw paragraph."}, {"_id": "0_1", "article": 0, "text": "Chopin."},
            {"_id": "1_0", "article": 1, "text": "Report paragraph."}, {"_id": "2_0", "article": 2, "text": "Rhine."}]
QUERIES = [
    {"id": "a", "relevant": ["0_0"], "answerable": True, "typed": "Where is Warsaw?", "human": "where is warsaw?",
     "machine": "where is war saw"},
    {"id": "b", "relevant": ["1_0"], "answerable": True, "typed": "Report?", "human": "report", "machine": "report"},
    {"id": "c", "relevant": ["2_0"], "answerable": True, "typed": "How long is the Rhine?", "human": "how long is the rain",
     "machine": "how long is the rhine?"},
]


def test_article_split_even_trains_odd_reports():
    assert article_split(PASSAGES, QUERIES) == {"a": "train", "b": "report", "c": "train"}


def test_article_split_names_a_query_with_an_unknown_paragraph():
    with pytest.raises(KeyError, match="query x: gold paragraph '9_9'"):
        article_split(PASSAGES, [{"id": "x", "relevant": ["9_9"]}])


def test_train_folds_split_the_train_half_by_article_and_leave_the_report_half_out():
    passages = PASSAGES + [{"_id": "4_0", "article": 4, "text": "Four."}, {"_id": "6_0", "article": 6, "text": "Six."}]
    queries = QUERIES + [{"id": "d", "relevant": ["4_0"]}, {"id": "e", "relevant": ["6_0"]}, {"id": "f", "relevant": ["0_1"]}]
    # train articles 0, 2, 4, 6 in order: folds 0, 1, 0, 1; "b" (article 1) reports and has no fold
    assert train_folds(passages, queries) == {"a": 0, "f": 0, "c": 1, "d": 0, "e": 1}
    assert train_folds(passages, queries, k=3) == {"a": 0, "f": 0, "c": 1, "d": 2, "e": 0}
    with pytest.raises(ValueError, match="at least 2"):
        train_folds(passages, queries, k=1)


def test_pairs_hold_no_report_question_or_paragraph_and_drop_repeated_transcripts():
    rows = training_pairs(PASSAGES, QUERIES, article_split(PASSAGES, QUERIES))
    assert {r["id"] for r in rows} == {"a", "c"}
    assert all(r["positive"] != "Report paragraph." for r in rows)
    # "where is warsaw?" is the typed question lower-cased: kept once (as typed); "how long is the rhine?" likewise
    assert [(r["id"], r["form"]) for r in rows] == [("a", "typed"), ("a", "machine"), ("c", "typed"), ("c", "human")]
    assert rows[1] == {"id": "a", "form": "machine", "query": "where is war saw", "positive": "Warsaw paragraph."}


def test_pairs_with_hard_negatives_use_another_paragraph_or_leave_the_row_out():
    split = article_split(PASSAGES, QUERIES)
    negatives = {"a": "0_1", "c": None}
    rows = training_pairs(PASSAGES, QUERIES, split,
                          hard_negative=lambda q, gold: negatives["a" if gold == "0_0" else "c"])
    assert [r["negative"] for r in rows] == ["Chopin.", "Chopin."]
    assert {r["id"] for r in rows} == {"a"}


def test_pairs_name_the_query_that_lacks_a_form():
    bad = [{**QUERIES[0], "human": ""}]
    with pytest.raises(ValueError, match="query a: no 'human' text"):
        training_pairs(PASSAGES, bad, {"a": "train"})


def test_answer_sentence_pairs_hold_the_span_sentence_and_the_hardest_other_sentence_of_its_paragraph():
    sentences = {"0_0": ["Warsaw is a city.", "Warsaw lies on the Vistula river.", "It has two million people."],
                 "1_0": ["Report paragraph holds 1990."], "2_0": ["The Rhine is long.", "It is 1,230 km long."]}
    queries = [{**QUERIES[0], "answers": ["the vistula"]}, {**QUERIES[1], "answers": ["1990"]},
               {**QUERIES[2], "answers": ["1,230 KM"]}, {**QUERIES[0], "id": "d", "answers": ["Paris"]}]
    split = {"a": "train", "b": "report", "c": "train", "d": "train"}
    texts = {"typed": {"a": "where is warsaw", "b": "report", "c": "how long is the rhine", "d": "x"},
             "human": {"a": "Where is Warsaw", "c": "how long is the rain", "d": "x"}, "machine": {}}
    seen = []

    def hardest(query, candidates):
        seen.append((query, list(candidates)))
        return candidates[-1]

    rows = answer_sentence_pairs(queries, texts, sentences.__getitem__, split, hardest)
    # b is a report question; d's span is in no sentence; a's human text repeats its typed one (lower-cased)
    assert rows == [
        {"id": "a", "form": "typed", "doc": "0_0", "query": "where is warsaw",
         "positive": "Warsaw lies on the Vistula river.", "negative": "It has two million people."},
        {"id": "c", "form": "typed", "doc": "2_0", "query": "how long is the rhine", "positive": "It is 1,230 km long.",
         "negative": "The Rhine is long."},
        {"id": "c", "form": "human", "doc": "2_0", "query": "how long is the rain", "positive": "It is 1,230 km long.",
         "negative": "The Rhine is long."}]
    assert seen[0] == ("where is warsaw", ["Warsaw is a city.", "It has two million people."])


def test_span_labels_mark_answer_sentences_of_the_gold_paragraph_only():
    from rag.train.evaluate import span_labels

    cands = [("Warsaw lies on the VISTULA.", "0_0"), ("The Vistula is long.", "9_9"), ("It is old.", "0_0")]
    assert span_labels(cands, ["the vistula", "Vistula"], "0_0").tolist() == [True, False, False]
    assert span_labels([], ["x"], "0_0").shape == (0,)


def test_pick_hit_takes_the_best_cosine_and_counts_no_answer_or_no_candidate_as_a_miss():
    from rag.train.evaluate import pick_hit

    groups = [{"query": "q1", "sentences": ["a", "b"], "y": np.array([False, True])},   # b scores best: hit
              {"query": "q2", "sentences": ["c", "d"], "y": np.array([True, False])},   # tie: the first, c: hit
              {"query": "q3", "sentences": ["e"], "y": np.array([False])},              # no answer: miss
              {"query": "q4", "sentences": [], "y": np.array([], bool)}]                # no candidate: miss
    scores = {"a": 0.1, "b": 0.9, "c": 0.5, "d": 0.5, "e": 1.0}
    assert pick_hit(groups, lambda q, ss: np.array([scores[s] for s in ss])) == 0.5
    with pytest.raises(ValueError, match="no groups"):
        pick_hit([], lambda q, ss: np.zeros(len(ss)))


def test_another_onnx_needs_its_sha256(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"not a model")
    with pytest.raises(ValueError, match="expected sha256"):
        MiniLMEmbedder(model=model)
    with pytest.raises(RuntimeError, match="sha256 differs"):
        MiniLMEmbedder(model=model, sha256="0" * 64)


def shipped():
    train = json.loads((ROOT / "metrics/finetune/train.json").read_text())
    return ROOT / train["shipped"]["path"], train["shipped"]["sha256"]


def test_the_committed_fine_tuned_model_matches_its_recorded_sha256():
    path, sha = shipped()
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha
    assert path.stat().st_size < 25_000_000  # weight-only 8/4-bit, small enough for git


def test_the_fine_tuned_model_embeds_and_still_ranks_the_clinic_sentence_first():
    path, sha = shipped()
    e = MiniLMEmbedder(model=path, sha256=sha)
    q, refill, hours = e.embed(["How long does a refill take?", "Prescription refills are processed within 3 business "
                                "days.", "We are open 8:30 to 6 on weekdays."])
    assert q.shape == (384,) and abs(float(np.linalg.norm(q)) - 1.0) < 1e-5
    assert q @ refill > q @ hours + 0.2


def test_the_committed_english_e5_encoder_matches_its_sha256_and_ranks_like_e5():
    from rag.retrieval.e5 import E5Embedder

    record = json.loads((ROOT / "metrics/finetune/e5.json").read_text())["shipped"]
    path = ROOT / record["path"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == record["sha256"]
    e = E5Embedder(path)
    q = e.embed_queries(["HOW LONG DOES A REFILL TAKE"])[0]
    refill, hours = e.embed_passages(["Prescription refills are processed within 3 business days.",
                                      "We are open 8:30 to 6 on weekdays."])
    assert abs(float(np.linalg.norm(q)) - 1.0) < 1e-5
    assert q @ refill > q @ hours + 0.05   # 0.80 vs 0.70 (2026-12-03): e5 cosines sit in a narrow cone


def test_the_committed_int8_question_side_matches_its_sha256_and_ranks_against_the_float16_passages():
    from rag.retrieval.e5 import E5Embedder

    record = json.loads((ROOT / "metrics/finetune/e5_q8.json").read_text())
    shipped = record["shipped"]
    path, source = ROOT / shipped["path"], ROOT / shipped["source"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == shipped["sha256"]
    assert hashlib.sha256(source.read_bytes()).hexdigest() == shipped["source_sha256"]
    assert path.stat().st_size < 0.6 * source.stat().st_size     # 23 MB of int8 against 44 MB of float16
    assert 0.99 < record["fidelity"]["queries_mean"] < 1.0 and record["fidelity"]["n_queries"] == 528
    q8, full = E5Embedder(path), E5Embedder(source)
    q = q8.embed_queries(["HOW LONG DOES A REFILL TAKE"])[0]
    refill, hours = full.embed_passages(["Prescription refills are processed within 3 business days.",
                                         "We are open 8:30 to 6 on weekdays."])
    assert q @ refill > q @ hours + 0.05
    assert 0.98 < float(q @ full.embed_queries(["HOW LONG DOES A REFILL TAKE"])[0]) < 0.99999


def test_the_committed_10_layer_question_side_matches_its_sha256_and_ranks_against_the_teachers_passages():
    from rag.retrieval.e5 import E5Embedder

    record = json.loads((ROOT / "metrics/finetune/e5_l10_query.json").read_text())
    shipped = record["shipped"]
    path, teacher = ROOT / shipped["path"], ROOT / record["settings"]["teacher"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == shipped["sha256"]
    assert (shipped["kind"], record["settings"]["layers"]) == ("q8", [0, 1, 2, 4, 5, 6, 7, 9, 10, 11])
    assert path.stat().st_size < 0.5 * teacher.stat().st_size     # 10 int8 layers against 12 float16 ones
    student, full = E5Embedder(path), E5Embedder(teacher)
    q = student.embed_queries(["HOW LONG DOES A REFILL TAKE"])[0]
    refill, hours = full.embed_passages(["Prescription refills are processed within 3 business days.",
                                         "We are open 8:30 to 6 on weekdays."])
    assert abs(float(np.linalg.norm(q)) - 1.0) < 1e-5
    assert q @ refill > q @ hours + 0.05
    assert 0.95 < float(q @ full.embed_queries(["HOW LONG DOES A REFILL TAKE"])[0]) < 0.99999   # taught, not copied


def test_the_committed_korean_e5_encoder_matches_its_sha256_and_ranks_the_answering_passage_first():
    from rag.retrieval.e5 import E5Embedder

    record = json.loads((ROOT / "metrics/ko/finetune.json").read_text())["shipped"]
    path = ROOT / record["path"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == record["sha256"]
    assert record["kind"] in ("q8", "half") and path.stat().st_size < 50_000_000
    e = E5Embedder(path)
    q = e.embed_queries(["서울 지점은 토요일에 몇 시에 문을 여나요?"])[0]
    hours, parking = e.embed_passages(["서울 지점은 토요일 오전 9시부터 오후 1시까지 영업합니다.",
                                       "주차는 건물 지하 주차장을 2시간 무료로 이용할 수 있습니다."])
    assert abs(float(np.linalg.norm(q)) - 1.0) < 1e-5
    assert q @ hours > q @ parking + 0.05   # packaged e5: 0.93 vs 0.82


def test_the_smallest_faithful_copy_is_the_first_in_order_that_keeps_min_fidelity():
    from rag.train.evaluate import smallest_faithful

    copies = {"q8": {"fidelity": 0.9962}, "half": {"fidelity": 1.0}}
    assert smallest_faithful(copies, ("q8", "half"), 0.999, "stage") == "half"
    assert smallest_faithful(copies, ("q8", "half"), 0.99, "stage") == "q8"
    with pytest.raises(RuntimeError, match=r"stage: no copy keeps min_fidelity 1.1: q8 0.9962, half 1.0"):
        smallest_faithful(copies, ("q8", "half"), 1.1, "stage")


@pytest.mark.train   # onnx (to build the model) comes with the .[train] extra
def test_half_weights_store_matmul_weights_in_float16_and_compute_in_float32(tmp_path):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from rag.train.finetune import half_weights

    w = np.random.default_rng(0).normal(0, 0.05, (8, 4)).astype(np.float32)
    graph = helper.make_graph(   # two MatMuls share one weight: it is stored once
        [helper.make_node("MatMul", ["x", "w"], ["a"]), helper.make_node("MatMul", ["x", "w"], ["b"]),
         helper.make_node("Add", ["a", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])], [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "fp32.onnx")
    half_weights(tmp_path / "fp32.onnx", tmp_path / "half.onnx")
    stored = onnx.load(tmp_path / "half.onnx").graph.initializer
    assert [(i.name, i.data_type) for i in stored] == [("w_fp16", TensorProto.FLOAT16)]
    x = np.random.default_rng(1).normal(size=(3, 8)).astype(np.float32)
    y = ort.InferenceSession(str(tmp_path / "half.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, 2 * x @ w.astype(np.float16).astype(np.float32), rtol=1e-5, atol=1e-6)
    assert 0 < np.abs(y - 2 * x @ w).max() < 1e-3      # float16 rounding, and only that
    big = onnx.load(tmp_path / "fp32.onnx")
    big.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.full((8, 4), 1e5, np.float32), "w"))
    onnx.save(big, tmp_path / "big.onnx")
    with pytest.raises(ValueError, match="weight w exceeds float16"):
        half_weights(tmp_path / "big.onnx", tmp_path / "big_half.onnx")
    assert not (tmp_path / "big_half.onnx").exists()


@pytest.mark.train   # onnx (to build the model) comes with the .[train] extra
def test_int8_weights_quantise_each_matmul_weight_per_column_from_a_float16_copy(tmp_path):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from rag.train.finetune import half_weights, int8_weights

    rng = np.random.default_rng(0)
    w = rng.normal(0, 0.05, (64, 16)).astype(np.float32)
    w[:, 3] *= 40      # one loud column: a per-column scale keeps the quiet ones fine
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 16])],
                              [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "fp32.onnx")
    half_weights(tmp_path / "fp32.onnx", tmp_path / "half.onnx")
    int8_weights(tmp_path / "half.onnx", tmp_path / "q8.onnx")
    model = onnx.load(tmp_path / "q8.onnx")
    assert "MatMulInteger" in {n.op_type for n in model.graph.node} and "MatMul" not in {n.op_type for n in model.graph.node}
    kinds = {i.name: i.data_type for i in model.graph.initializer}
    assert TensorProto.FLOAT16 not in kinds.values() and kinds["w_fp16_quantized"] == TensorProto.INT8
    assert numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == "w_fp16_scale")).shape == (16,)
    x = rng.normal(size=(5, 64)).astype(np.float32)
    y = ort.InferenceSession(str(tmp_path / "q8.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    exact = x @ w
    quiet = [c for c in range(16) if c != 3]
    err = np.abs(y - exact)
    assert 0 < err[:, quiet].max() < 0.02 and err[:, quiet].max() < 0.1 * err[:, 3].max()


@pytest.mark.train   # onnx comes with the .[train] extra
def test_fuse_attention_makes_one_node_of_each_layers_attention_and_keeps_the_vectors(tmp_path):
    import onnx

    from rag.retrieval.e5 import E5Embedder
    from rag.train.finetune import fuse_attention

    model = onnx.load(ROOT / "models/e5-heysquad-asr.onnx")
    before = len(model.graph.node)
    assert fuse_attention(model) == 12
    kinds = [n.op_type for n in model.graph.node]
    assert kinds.count("MultiHeadAttention") == 12 and "IsNaN" not in kinds and len(kinds) < before / 3
    onnx.save(model, tmp_path / "fused.onnx")
    texts = ["HOW LONG DOES A REFILL TAKE", "Prescription refills are processed within 3 business days.", "hi"]
    fused, plain = E5Embedder(tmp_path / "fused.onnx"), E5Embedder(ROOT / "models/e5-heysquad-asr.onnx")
    np.testing.assert_allclose(fused.embed_passages(texts), plain.embed_passages(texts), atol=1e-5)  # padded batch
    assert fuse_attention(onnx.load(tmp_path / "fused.onnx")) == 0   # nothing left to fuse


def test_mean_std_is_the_mean_and_sample_std_over_models():
    from rag.train.evaluate import FORMS, MODES, mean_std, report_table

    def half(x):
        return {f: {m: {"mrr@10": x, "recall@1": x / 2} for m in MODES} for f in FORMS}

    models = [{"seed": s, "fp32": {"metrics": half(0.9)}, "q": {"metrics": half(x)}} for s, x in ((0, 0.5), (1, 0.7))]
    ms = mean_std(models)
    assert ms["human"]["dense"]["mrr@10"] == [0.6, 0.1414]
    assert ms["typed"]["hybrid_phonetic"]["recall@1"] == [0.3, 0.0707]
    table = report_table({"before": half(0.4), "models": models, "mean_std": ms}, "mean_std", lambda r: f"seed {r['seed']}")
    assert "| seed 1 | q | 0.700 |" in table and "| mean ± std over seeds | q | 0.600 ± 0.141 |" in table


def test_fusion_mean_std_is_per_form_and_fusion_over_seeds():
    from rag.train.evaluate import fusion_mean_std

    def seed(convex):
        return {"report_mrr@10": {f: {"rrf": 0.8, "rrf_tuned": 0.85, "convex": convex + (0.1 if f == "typed" else 0)}
                                  for f in ("typed", "human", "machine")}}

    ms = fusion_mean_std([seed(0.9), seed(0.92), seed(0.88)])
    assert ms["human"] == {"rrf": [0.8, 0.0], "rrf_tuned": [0.85, 0.0], "convex": [0.9, 0.02]}
    assert ms["typed"]["convex"] == [1.0, 0.02]
    assert fusion_mean_std([seed(0.9)])["machine"]["convex"] == [0.9, 0.0]


@pytest.mark.train
def test_export_matches_torch_and_the_quantised_copy_stays_close(tmp_path):
    from sentence_transformers import SentenceTransformer

    from rag.train.finetune import export_onnx, quantize_weights, start_weights

    texts = ["how much is a flu shot", "A flu shot costs $30.", "what year was cassimir koloski born in warsaw",
             "Prescription refills are processed within 3 business days."]
    model = SentenceTransformer(str(start_weights()), device="cpu")
    export_onnx(model, tmp_path / "fp32.onnx")
    quantize_weights(tmp_path / "fp32.onnx", tmp_path / "q.onnx")
    ref = model.encode(texts, normalize_embeddings=True)
    for name, floor in (("fp32", 0.999), ("q", 0.99)):
        f = tmp_path / f"{name}.onnx"
        got = MiniLMEmbedder(model=f, sha256=hashlib.sha256(f.read_bytes()).hexdigest()).embed(texts)
        assert (got * ref).sum(axis=1).min() >= floor, name
    assert (tmp_path / "q.onnx").stat().st_size < 0.3 * (tmp_path / "fp32.onnx").stat().st_size


def test_compare_fusions_chooses_weights_on_the_train_part_only_and_scores_the_report_part():
    from rag.train.evaluate import compare_fusions

    # train q1 (gold p0): list A ranks it first, list B third; report q2 (gold p2): A third, B first
    a = {"train": {"q1": [(0, 1.0), (1, 0.5), (2, 0.0)]}, "report": {"q2": [(0, 1.0), (1, 0.5), (2, 0.0)]}}
    b = {"train": {"q1": [(1, 1.0), (2, 0.5), (0, 0.0)]}, "report": {"q2": [(2, 1.0), (1, 0.5), (0, 0.0)]}}
    lists = {"human": {part: [a[part], b[part]] for part in ("train", "report")}}
    out = compare_fusions(lists, {"q1": {"p0": 1}, "q2": {"p2": 1}}, ["p0", "p1", "p2"], [1.0, 1.0], 1, [0.0, 1.0], "human")
    # on train, A alone is right (MRR 1); both lists at 1/1 put p1 first (RRF 1/3 + 1/2; convex 0.5 + 1), MRR 1/2
    assert out["weights"] == {"rrf_tuned": [1.0, 0.0], "convex": [1.0, 0.0]}
    assert out["train_mrr@10"] == {"rrf": 0.5, "rrf_tuned": 1.0, "convex": 1.0}
    # the report question wants B: weights chosen there would score 1.0; chosen on train they score 1/3, and RRF at
    # 1/1 ties p0 and p2 (1/2 + 1/4 each), the tie to the lower index, so p2 is second
    assert out["report_mrr@10"] == {"human": {"rrf": 0.5, "rrf_tuned": 0.3333, "convex": 0.3333}}


def test_convex_hybrid_searches_each_form_as_texts_of_makes_it(tmp_path):
    """`rag.train.evaluate.convex_hybrid` searches what ``texts_of`` gives (finetune_eval: the raw transcripts, and the
    voice chain's rewrite): the report question "report" heard as "re port" finds nothing lexically until the
    rewrite joins it again; the dense side (a constant vector) cannot tell the passages apart."""
    from rag.io import write_jsonl
    from rag.retrieval.search import HybridConfig
    from rag.train.evaluate import convex_hybrid

    class Flat:  # every text the same unit vector: the dense list ties, the lexical lists decide
        def embed(self, texts):
            return np.ones((len(texts), 4), np.float32) / 2

    heard = [{**q, "human": "re port" if q["id"] == "b" else q["human"]} for q in QUERIES]
    write_jsonl(tmp_path / "passages.jsonl", PASSAGES)
    write_jsonl(tmp_path / "queries.jsonl", heard)
    seen = []

    def rejoined(qs):
        seen.append(len(qs))
        return {q["id"]: q["asr"].replace("re port", "report") for q in qs}

    args = (tmp_path, HybridConfig(rrf_k=10, depth=4, phonetic_ngram=0), Flat(), Flat(), [0.0, 1.0])
    raw, rewritten = convex_hybrid(*args), convex_hybrid(*args, texts_of=rejoined)
    assert seen == [3, 3, 3]  # typed, human, machine: every question of each form
    assert rewritten["report_mrr@10"]["human"]["convex"] == 1.0
    assert raw["report_mrr@10"]["human"]["convex"] < 1.0


def test_convex_hybrid_adds_a_fourth_list_of_paragraphs_by_their_best_sentence(tmp_path):
    """With ``sentence_sides`` (finetune_eval, session 56: the answer-sentence e5), paragraphs are also ranked by the
    best cosine of any of their sentences. Here the lexical lists miss the garbled "war saw" and "re port" and the
    dense list ties every paragraph, so only the sentence list finds them: it gets a fourth weight, chosen on the train
    half, and the report question is found first."""
    from rag.io import write_jsonl
    from rag.retrieval.search import HybridConfig
    from rag.train.evaluate import convex_hybrid

    class Flat:
        def embed(self, texts):
            return np.ones((len(texts), 4), np.float32) / 2

    class Keys:   # a sentence encoder that hears through the recogniser: one axis per topic
        def embed(self, texts):
            keys = (("saw", "warsaw"), ("port",), ("rain", "rhine"), ("chopin",))
            return np.array([[float(any(k in t.lower() for k in ks)) for ks in keys] for t in texts], np.float32)

    heard = {"a": "war saw", "b": "re port", "c": "the rain"}
    write_jsonl(tmp_path / "passages.jsonl", PASSAGES)
    write_jsonl(tmp_path / "queries.jsonl", [{**q, "human": heard[q["id"]]} for q in QUERIES])
    args = (tmp_path, HybridConfig(rrf_k=10, depth=4, phonetic_ngram=0), Flat(), Flat(), [0.0, 1.0])
    three, four = convex_hybrid(*args), convex_hybrid(*args, sentence_sides=(Keys(), Keys()))
    assert len(three["weights"]["convex"]) == 3 and three["report_mrr@10"]["human"]["convex"] < 1.0
    assert len(four["weights"]["convex"]) == 4 and four["weights"]["convex"][3] > 0
    assert four["train_mrr@10"]["convex"] == 1.0 and four["report_mrr@10"]["human"]["convex"] == 1.0


def test_report_half_scores_the_given_questions_instead_of_the_report_half(tmp_path):
    """The stage finetune's cross-validation scores a held-out fold of the train half through `report_half`'s
    ``question_ids``: by default only "b" (odd article) is scored; with ids, exactly those questions, whatever half."""
    from rag.io import write_jsonl
    from rag.retrieval.search import HybridConfig
    from rag.train.evaluate import report_half

    class Seen:  # every text the same unit vector; records the questions it embeds after the passages
        def __init__(self):
            self.calls = []

        def embed(self, texts):
            self.calls.append(list(texts))
            return np.ones((len(texts), 4), np.float32) / 2

    write_jsonl(tmp_path / "passages.jsonl", PASSAGES)
    write_jsonl(tmp_path / "queries.jsonl", QUERIES)
    config = HybridConfig(rrf_k=10, depth=4, phonetic_ngram=0)
    default, chosen = Seen(), Seen()
    report_half(tmp_path, config, default, modes=("dense",))
    report_half(tmp_path, config, chosen, modes=("dense",), question_ids={"a", "c"})
    questions = lambda e: sorted({t for call in e.calls[1:] for t in call})  # calls[0]: the 4 paragraphs
    assert questions(default) == ["Report?", "report"]
    assert questions(chosen) == sorted(["Where is Warsaw?", "where is warsaw?", "where is war saw",
                                        "How long is the Rhine?", "how long is the rain", "how long is the rhine?"])
    with pytest.raises(ValueError, match="names no question"):
        report_half(tmp_path, config, Seen(), question_ids={"zz"})


def test_the_cross_validation_choice_takes_the_best_mean_and_breaks_near_ties_by_fewer_epochs_then_lower_rate():
    import sys
    sys.path.insert(0, str(ROOT / "stages"))
    from finetune import chosen, label   # a stage script, importable for its functions

    grid = [(2e-5, 1), (2e-5, 3), (1e-4, 1), (1e-4, 3)]
    mean = {label(*g): v for g, v in zip(grid, (0.70, 0.74, 0.72, 0.75))}
    assert chosen(grid, mean) == (1e-4, 3)
    mean[label(2e-5, 3)] = 0.7496           # within 0.0005 of the best: fewer epochs do not help, the lower rate does
    assert chosen(grid, mean) == (2e-5, 3)
    mean[label(1e-4, 1)] = 0.7499           # one epoch within the tie band beats three
    assert chosen(grid, mean) == (1e-4, 1)
