"""Phonetic keys (rag.retrieval.phonetic) and the hybrid_phonetic mode (rag.retrieval.search), keys computed by hand."""
import dataclasses

import numpy as np
import pytest

from rag.retrieval.chunk import Passage
from rag.retrieval.phonetic import phonetic_key, phonetic_ngrams, phonetic_tokens, tokenizer
from rag.retrieval.indexes import rrf_fuse
from rag.retrieval.search import MODES, HybridConfig, PassageIndex


def test_misheard_word_shares_the_right_words_key():
    # Metaphone: G before U is K, the vowels after the first letter drop, S and the Z-sound S are S.
    assert phonetic_key("guise") == phonetic_key("guys") == "ks"
    assert phonetic_key("knight") == phonetic_key("night") == "nt"  # silent K
    assert phonetic_key("phone") == phonetic_key("fone") == "fn"  # PH is F
    assert phonetic_key("guise", "nysiis") != phonetic_key("guys", "nysiis")  # GAS vs GY: not every encoder
    with pytest.raises(ValueError, match="unknown phonetic encoder"):
        phonetic_key("guys", "soundex")


def test_words_without_letters_keep_themselves():
    assert phonetic_key("911") == "911"  # metaphone gives "" for digits: they must not all collide
    assert phonetic_tokens("call 911 now") == ["kl", "911", "n"]


def test_tokens_drop_stopwords_before_keying():
    assert phonetic_tokens("Do you guys open on Saturday?", {"do", "you", "on"}) == ["ks", "opn", "strt"]


def test_ngrams_survive_a_moved_word_boundary():
    # "a refill" -> keys a + rfl -> "arfl"; the recogniser's "orifyl" -> "orfl": they share "rfl".
    assert phonetic_ngrams("a refill", 3) == ["arf", "rfl"]
    assert phonetic_ngrams("orifyl", 3) == ["orf", "rfl"]
    assert phonetic_ngrams("guys", 3) == ["ks"]  # shorter than n: the whole key
    assert phonetic_ngrams("the", 3, stopwords={"the"}) == []
    assert tokenizer("none", 3)("a refill") == ["are", "ref", "efi", "fil", "ill"]  # plain spelling grams
    assert tokenizer("metaphone", 0)("guys") == ["ks"]
    with pytest.raises(ValueError):
        phonetic_ngrams("x", 0)


PASSAGES = [Passage("kb-hours#1", "kb-hours", "We open at nine on Saturday."),
            Passage("kb-parking#1", "kb-parking", "Parking behind the building is free."),
            Passage("kb-refills#1", "kb-refills", "A refill is ready in three business days.")]


def toy_index(**config) -> PassageIndex:
    # Every passage has the same vector: the dense list is a tie, broken by passage order (hours first).
    vectors = np.tile(np.array([1.0, 0.0, 0.0, 0.0], np.float32), (3, 1))
    return PassageIndex(PASSAGES, vectors, HybridConfig(rrf_k=10, weights=(1.0, 1.0), **config))


def test_hybrid_phonetic_finds_the_misheard_refill():
    index, qv = toy_index(), np.array([1.0, 0.0, 0.0, 0.0], np.float32)
    assert "hybrid_phonetic" in MODES
    # "orifyl" is no word of the KB: BM25 has nothing, so hybrid is the dense tie, hours first.
    assert index.bm25_ranking("orifyl") == []
    assert index.search("orifyl", 1, "hybrid", qv)[0][0] == "kb-hours#1"
    # Metaphone 3-grams: the refill passage shares "rfl" (refill) with "orf rfl" (orifyl).
    assert [i for i, _ in index.phonetic_ranking("orifyl")] == [2]
    top = index.search("orifyl", 3, "hybrid_phonetic", qv)
    assert top[0][0] == "kb-refills#1"
    # RRF by hand (k=10): refill is 3rd in dense (1/13) and 1st phonetic (1/11); hours 1st dense only (1/11).
    assert top[0][1] == pytest.approx(1 / 13 + 1 / 11) and top[1] == ("kb-hours#1", pytest.approx(1 / 11))


def test_hybrid_phonetic_weight_and_backward_compatibility():
    qv = np.array([1.0, 0.0, 0.0, 0.0], np.float32)
    index = toy_index(phonetic_weight=0.0)  # a zero-weight third list adds nothing
    assert [i for i, _ in index.ranking("orifyl", "hybrid_phonetic", qv)] == \
        [i for i, _ in index.ranking("orifyl", "hybrid", qv)]
    index = toy_index()
    c = index.config
    assert index.ranking("free parking", "hybrid", qv) == rrf_fuse(
        [index.dense_ranking(qv, c.depth), index.bm25_ranking("free parking", c.depth)], k=10, weights=(1.0, 1.0))
    assert dataclasses.replace(HybridConfig()).phonetic_encoder == "metaphone"
    word_keys = toy_index(phonetic_ngram=0)  # whole-word keys: "orifyl" (orfl) is no KB word's key
    assert word_keys.phonetic_ranking("orifyl") == []
    assert word_keys.phonetic_ranking("guise parking")[0][0] == 1
