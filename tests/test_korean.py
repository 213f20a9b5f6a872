"""Korean tokenizers (whitespace, Kiwi morphemes, character bigrams) for BM25, and the USE embedder."""
import numpy as np
import pytest

from rag.ko import tokenize as korean
from rag.ko.tokenize import char_bigrams, kiwi_tokens, kiwi_tokens_batch, whitespace_tokens
from rag.retrieval.indexes import BM25Index

PASSAGES = [
    "서울은 대한민국의 수도이다.",
    "부산은 항구 도시이다.",
    "한라산은 제주도에 있다.",
]


def test_kiwi_query_matches_a_particle_form_that_whitespace_misses():
    kiwi_index = BM25Index(PASSAGES, kiwi_tokens)
    scores = kiwi_index.get_scores("서울")
    assert scores[0] > 0 and scores[1] == 0 and scores[2] == 0
    assert kiwi_index.top_k("서울", 1)[0][0] == 0

    ws_index = BM25Index(PASSAGES, whitespace_tokens)
    assert "서울" not in ws_index.vocabulary and "서울은" in ws_index.vocabulary
    assert list(ws_index.get_scores("서울")) == [0.0, 0.0, 0.0]


def test_kiwi_keeps_content_morphemes_only():
    assert kiwi_tokens("서울은 대한민국의 수도이다.") == ["서울", "대한민국", "수도"]
    # numbers (SN), bound noun 년 (NNB), foreign word lower-cased (SL), verb stem 먹 (VV)
    assert kiwi_tokens("1989년 AI가 밥을 먹었다") == ["1989", "년", "ai", "밥", "먹"]
    # irregular adjective: Kiwi tags 아름답 as VA-I; the base tag VA counts
    assert "아름답" in kiwi_tokens("아름다운 꽃")
    assert kiwi_tokens("") == [] and kiwi_tokens("  ") == []


def test_kiwi_batch_equals_one_by_one_and_instance_is_shared():
    texts = PASSAGES + ["", "서울"]
    assert kiwi_tokens_batch(texts) == [kiwi_tokens(t) for t in texts]
    assert korean.kiwi() is korean.kiwi()


def test_char_bigrams_stay_inside_words():
    assert char_bigrams("서울은 곧") == ["서울", "울은", "곧"]
    assert char_bigrams("AI가, 왔다!") == ["ai", "i가", "왔다"]
    assert char_bigrams("") == []
    # the bigram index also matches 서울 inside 서울은
    assert BM25Index(PASSAGES, char_bigrams).get_scores("서울")[0] > 0


def test_whitespace_tokens():
    assert whitespace_tokens("서울은  대한민국의\n수도 AI.") == ["서울은", "대한민국의", "수도", "ai."]


def test_tokenizer_versions():
    assert "kiwipiepy 0.24.1" in korean.kiwi_version()
    assert "kiwipiepy 0.24.1" in korean.tokenizer_version("kiwi")
    assert "bigram" in korean.tokenizer_version("bigram")
    with pytest.raises(KeyError):
        korean.tokenizer_version("mecab")


from rag.ko import dense as use_embed  # noqa: E402  (the model is installed by the Makefile: requirements-nodeps.txt)


def test_use_embeddings_are_unit_512_rows_and_rank_a_paraphrase_first():
    vecs = use_embed.embed(["서울은 대한민국의 수도이다.", "한국의 수도는 어디인가?", "고양이가 소파에서 잔다."], batch_size=2)
    assert vecs.shape == (3, 512) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert vecs[1] @ vecs[0] > vecs[1] @ vecs[2] + 0.2
    assert use_embed.embed([]).shape == (0, 512)
    assert use_embed.session() is use_embed.session()
    with pytest.raises(ValueError):
        use_embed.embed(["x"], batch_size=0)
