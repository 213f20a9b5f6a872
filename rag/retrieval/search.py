"""Passage search over a knowledge base: dense (MiniLM cosine), BM25, hybrid RRF, or hybrid RRF with
a third, sound-alike BM25 list over phonetic keys (``hybrid_phonetic``, `rag.retrieval.phonetic`).

``search(query, k)`` searches the default index, the clinic KB in ``fixtures/voice/kb``.
"""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import snowballstemmer

from rag.retrieval.chunk import Passage, chunk_folder
from rag.io import normalise_text
from rag.retrieval.indexes import (BM25_ENGINES, BM25Index, DenseIndex, HNSWIndex, Ranking, best_sentence_ranking,
                                   convex_fuse, fusion_weights, identifiers, promote_exact_hit, promote_quoted, rrf_fuse,
                                   word_tokens)

DEFAULT_KB = Path(__file__).resolve().parents[2] / "fixtures" / "voice" / "kb"
MODES = ("dense", "bm25", "hybrid", "hybrid_phonetic")
STEMMERS = ("none", "snowball")  # `HybridConfig.stemmer`
FUSIONS = ("rrf", "convex")  # `HybridConfig.fusion`
_SNOWBALL = threading.local()  # one English stemmer per thread: a snowballstemmer object keeps the word it is
                               # stemming in itself, so threads sharing one corrupt each other's words (16 callers of
                               # the load stage: IndexError inside stemWord, session 54)


def stem_words(tokens: Sequence[str]) -> list[str]:
    """Snowball's English stems of ``tokens`` (``snowballstemmer``), safe to call from many threads at once."""
    stemmer = getattr(_SNOWBALL, "english", None)
    if stemmer is None:
        stemmer = _SNOWBALL.english = snowballstemmer.stemmer("english")
    return stemmer.stemWords(tokens)


@dataclass(frozen=True)
class HybridConfig:
    """How BM25 and hybrid search behave (params.yaml ``retrieval``).

    stopwords / min_token_len: the BM25 tokenizer; depth: how many candidates of each list RRF
    fuses; rrf_k: RRF's k (60 in Cormack et al. 2009); weights: (dense, bm25) RRF weights;
    bm25_floor: BM25 candidates scoring at or below it are not evidence and are left out.
    phonetic_*: the extra list of ``hybrid_phonetic``, BM25 over `rag.retrieval.phonetic` keys of the same
    (stopword-filtered) words: its RRF weight, encoder (metaphone | nysiis | mrc | none) and ngram
    (0 = one key per word, n = character n-grams of the keys run together). Defaults (metaphone
    3-grams, weight 1.0) chosen on half of HeySQuAD (even articles), checked on the other half.
    bm25_engine: `rag.retrieval.indexes.BM25_ENGINES` (rank_bm25, or bm25s for large KBs).
    stemmer: `STEMMERS`: ``snowball`` reduces BM25's tokens to their Snowball English stems (Porter 2001, the
    ``snowballstemmer`` package: "shots" and "shot", "parking" and "park" match); ``none`` keeps them as written.
    fusion: `FUSIONS`: how the hybrid modes join their lists: ``rrf`` (`rag.retrieval.indexes.rrf_fuse` at
    ``weights`` / ``phonetic_weight`` and ``rrf_k``: ranks only) or ``convex``
    (`rag.retrieval.indexes.convex_fuse` at ``convex_weights`` (dense, bm25, phonetic): each list's scores min-max
    normalised over its top ``depth``, then a weighted sum; Bruch, Gai & Ingber 2023).
    sentence_weight: 0 (default) or the weight, in either fusion, of a fourth list of ``hybrid_phonetic``: passages by
    the best cosine of any of their sentences (`rag.voice.verify.split_sentences`) with the same query vector
    (`PassageIndex.sentence_ranking`); the sentences are embedded by the process-wide passage side on first use.
    Not in ``hybrid``, whose RRF score the gate reads.
    """

    rrf_k: int = 60
    depth: int = 20
    weights: tuple[float, float] = (1.0, 1.0)
    stopwords: frozenset[str] = frozenset()
    min_token_len: int = 1
    bm25_floor: float = 0.0
    phonetic_weight: float = 1.0
    phonetic_encoder: str = "metaphone"
    phonetic_ngram: int = 3
    index: str = "exact"            # the dense list: exact (numpy matmul) | hnsw (faiss, approximate)
    hnsw: tuple[int, int, int] = (16, 80, 64)   # (m, ef_construction, ef_search) of `HNSWIndex`
    bm25_engine: str = "rank_bm25"
    stemmer: str = "none"
    fusion: str = "rrf"
    convex_weights: tuple[float, float, float] = (1.0, 1.0, 1.0)
    sentence_weight: float = 0.0

    def __post_init__(self):
        if (isinstance(self.sentence_weight, bool) or not isinstance(self.sentence_weight, (int, float))
                or not 0 <= self.sentence_weight < float("inf")):
            raise ValueError(f"retrieval.sentence_weight must be a finite number >= 0, got {self.sentence_weight!r}")
        if self.fusion not in FUSIONS:
            raise ValueError(f"retrieval.fusion must be one of {FUSIONS}, got {self.fusion!r}")
        fusion_weights(self.convex_weights, "retrieval.convex_weights (dense, bm25, phonetic)", 3)
        if self.stemmer not in STEMMERS:
            raise ValueError(f"stemmer must be one of {STEMMERS}, got {self.stemmer!r}")
        if self.index not in ("exact", "hnsw"):
            raise ValueError(f"retrieval.index must be exact or hnsw, got {self.index!r}")
        if self.bm25_engine not in BM25_ENGINES:
            raise ValueError(f"retrieval.bm25_engine must be one of {BM25_ENGINES}, got {self.bm25_engine!r}")
        # a boolean in the list would silently never match a token
        bad = sorted(repr(w) for w in self.stopwords if not isinstance(w, str))
        if bad:
            raise ValueError(f"stopwords must be strings, got {', '.join(bad)}")


@dataclass
class PassageIndex:
    """Passages with their (n, 384) unit embeddings and a lazily built BM25 index."""

    passages: list[Passage]
    vectors: np.ndarray
    config: HybridConfig = field(default_factory=HybridConfig)
    dense: DenseIndex | HNSWIndex | None = None   # None: built here as ``config.index`` says

    def __post_init__(self):
        if len(self.passages) != len(self.vectors):
            raise ValueError(f"{len(self.passages)} passages but {len(self.vectors)} vectors")
        if self.dense is None:
            m, ef_construction, ef_search = self.config.hnsw
            self.dense = (HNSWIndex(self.vectors, m, ef_construction, ef_search) if self.config.index == "hnsw"
                          else DenseIndex(self.vectors))
        self._bm25: BM25Index | None = None
        self._phonetic: BM25Index | None = None
        self._named_by: dict[str, list[int]] | None = None
        self._sentences: tuple[np.ndarray, np.ndarray] | None = None

    @classmethod
    def from_folder(cls, folder: str | Path, config: HybridConfig = HybridConfig(),
                    allow_instructions: bool = False) -> "PassageIndex":
        """Chunk ``folder`` (see `rag.retrieval.chunk.chunk_folder`: instruction-like paragraphs quarantined unless
        ``allow_instructions``) and embed every passage."""
        from rag.retrieval.embed import passage_embedder

        passages = chunk_folder(folder, allow_instructions)
        return cls(passages, passage_embedder().embed([p.text for p in passages]), config)

    def tokenize(self, text: str) -> list[str]:
        """The BM25 tokenizer of this index's config (stemmed when ``config.stemmer`` says so)."""
        tokens = word_tokens(text, self.config.stopwords, self.config.min_token_len)
        return stem_words(tokens) if self.config.stemmer == "snowball" else tokens

    @property
    def bm25(self) -> BM25Index:
        if self._bm25 is None:
            self._bm25 = BM25Index([p.indexed for p in self.passages], self.tokenize, engine=self.config.bm25_engine)
        return self._bm25

    @property
    def phonetic(self) -> BM25Index:
        """BM25 over the passages' phonetic keys (`rag.retrieval.phonetic.tokenizer` of this config)."""
        if self._phonetic is None:
            from rag.retrieval.phonetic import tokenizer

            c = self.config
            self._phonetic = BM25Index([p.indexed for p in self.passages],
                                       tokenizer(c.phonetic_encoder, c.phonetic_ngram, c.stopwords, c.min_token_len),
                                       engine=c.bm25_engine)
        return self._phonetic

    @property
    def named_by(self) -> dict[str, list[int]]:
        """Each phone number or code the passages name (`rag.retrieval.indexes.identifiers`, digits only) -> the
        passages naming it, in order; built on first use."""
        if self._named_by is None:  # built whole, then published: a thread never sees it half built
            named: dict[str, list[int]] = {}
            for i, p in enumerate(self.passages):
                for ident in sorted(identifiers(p.text)):
                    named.setdefault(ident, []).append(i)
            self._named_by = named
        return self._named_by

    def sentence_ranking(self, query_vector: np.ndarray, depth: int | None = None) -> Ranking:
        """Passages by the best cosine of any of their sentences with the unit query vector, best first
        (`rag.retrieval.indexes.best_sentence_ranking`). The sentences (`rag.voice.verify.split_sentences` of each
        passage) are embedded on first use by `rag.retrieval.embed.passage_embedder`, the process-wide encoder's
        passage side, which must be the one that embedded the query's side."""
        if self._sentences is None:
            from rag.retrieval.embed import passage_embedder
            from rag.voice.verify import split_sentences

            owner, texts = [], []
            for i, p in enumerate(self.passages):
                parts = split_sentences(p.text) or [p.text]
                owner += [i] * len(parts)
                texts += parts
            self._sentences = (np.array(owner), passage_embedder().embed(texts))
        return best_sentence_ranking(*self._sentences, query_vector, len(self.passages), depth)

    def dense_ranking(self, query_vector: np.ndarray, depth: int | None = None) -> Ranking:
        """Passages by cosine with the (384,) unit query vector, best first (``hnsw``: at most ef_search)."""
        return self.dense.top_k(query_vector, depth)

    def bm25_ranking(self, query: str, depth: int | None = None) -> Ranking:
        """Passages by BM25 score, best first, keeping only scores above ``bm25_floor``."""
        return [(i, s) for i, s in self.bm25.top_k(query, depth or len(self.passages))
                if s > self.config.bm25_floor]

    def phonetic_ranking(self, query: str, depth: int | None = None) -> Ranking:
        """Passages by phonetic-key BM25 score, best first, keeping only scores above ``bm25_floor``."""
        return [(i, s) for i, s in self.phonetic.top_k(query, depth or len(self.passages))
                if s > self.config.bm25_floor]

    def search(self, query: str, k: int = 3, mode: str = "dense",
               query_vector: np.ndarray | None = None) -> list[tuple[str, float]]:
        """Top-``k`` passages as ``(passage_id, score)``, best first.

        score: cosine for ``dense``, BM25 for ``bm25``, RRF score for ``hybrid`` / ``hybrid_phonetic``.
        ``query_vector`` skips embedding when the caller already has it.
        Raises ValueError for an unknown mode or ``k < 1``.
        """
        if mode not in MODES:
            raise ValueError(f"unknown retrieval mode {mode!r}; expected one of {MODES}")
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        ranking = self.ranking(query, mode, query_vector)[:k]
        return [(self.passages[i].id, s) for i, s in ranking]

    def ranking(self, query: str, mode: str, query_vector: np.ndarray | None = None,
                fusion: str | None = None) -> Ranking:
        """The full ranking of one mode (hybrid: the dense and BM25 lists' top ``depth`` fused; hybrid_phonetic: the
        same plus the phonetic list's top ``depth`` and, when ``config.sentence_weight`` > 0, `sentence_ranking`'s;
        fused as ``fusion`` says, default the config's
        (`HybridConfig.fusion`); in both, a passage every lexical list ranks first for a unique exact number of the
        query stays first, `rag.retrieval.indexes.promote_exact_hit`). In every mode, the one passage naming a phone
        number or code the query quotes goes first (`rag.retrieval.indexes.promote_quoted`: "what is 5550177" finds
        the passage saying "555-0177"). Scores: cosine (dense), BM25 (bm25), RRF or convex score (hybrid modes)."""
        if mode not in MODES:
            raise ValueError(f"unknown retrieval mode {mode!r}; expected one of {MODES}")
        query = normalise_text(query)  # as the passages were (rag.retrieval.chunk): "ｆｌｕ ｓｈｏｔ" finds "flu shot"
        if mode != "bm25" and query_vector is None:
            from rag.retrieval.embed import query_embedder

            query_vector = query_embedder().embed_one(query)
        if mode == "dense":
            ranked = self.dense_ranking(query_vector)
        elif mode == "bm25":
            ranked = self.bm25_ranking(query)
        else:
            c = self.config
            lexical = [self.bm25_ranking(query, c.depth)]
            if mode == "hybrid_phonetic":
                lexical.append(self.phonetic_ranking(query, c.depth))
            lists = [self.dense_ranking(query_vector, c.depth), *lexical]
            n = len(lists)
            fusion = fusion or c.fusion
            if fusion not in FUSIONS:
                raise ValueError(f"unknown fusion {fusion!r}; expected one of {FUSIONS}")
            weights = list(c.convex_weights[:n] if fusion == "convex" else [*c.weights, c.phonetic_weight][:n])
            if mode == "hybrid_phonetic" and c.sentence_weight > 0:
                lists.append(self.sentence_ranking(query_vector, c.depth))
                weights.append(c.sentence_weight)
            fused = convex_fuse(lists, weights) if fusion == "convex" else rrf_fuse(lists, k=c.rrf_k, weights=weights)
            ranked = promote_exact_hit(fused, lexical, self.tokenize(query), self.bm25.postings)
        quoted = identifiers(query)
        return promote_quoted(ranked, quoted, self.named_by) if quoted else ranked


def doc_ranking(passages: Sequence[Passage], ranking: Ranking) -> list[tuple[str, float]]:
    """Collapse a passage ranking to documents: each doc once, at its best passage's rank and score."""
    seen: dict[str, float] = {}
    for i, s in ranking:
        seen.setdefault(passages[i].doc, s)
    return list(seen.items())


@functools.lru_cache(maxsize=1)
def default_index() -> PassageIndex:
    """The clinic KB (``fixtures/voice/kb``), chunked and embedded once per process."""
    return PassageIndex.from_folder(DEFAULT_KB)


def search(query: str, k: int = 3) -> list[tuple[str, float]]:
    """Dense top-``k`` over the default index: ``[(passage_id, cosine)]``, cosine descending."""
    return default_index().search(query, k, "dense")
