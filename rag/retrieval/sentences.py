"""The sentences of a KB, split and embedded once at index time (not at question time).

The extractive pick and the gate's answer checks score the sentences of the retrieved documents; embedding
them per question cost ~230 ms a turn on HeySQuAD's paper-length paragraphs. A `SentenceIndex` holds, for
every document, its sentences (`rag.voice.verify.split_sentences`, in order) and their MiniLM vectors.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from rag.voice.verify import split_sentences


class SentenceIndex:
    """Per document: its sentences in order and their (384,) unit embeddings.

    rows: ``(doc, position, sentence)`` in document order then position order; vectors: (len(rows), 384)
    float32, L2-normalised, row i is ``rows[i]``'s sentence. Raises ValueError when the two disagree in length.
    """

    def __init__(self, rows: list[tuple[str, int, str]], vectors: np.ndarray):
        if len(rows) != len(vectors):
            raise ValueError(f"{len(rows)} sentences but {len(vectors)} vectors")
        self.rows = rows
        self.vectors = np.asarray(vectors, dtype=np.float32)
        if self.vectors.ndim != 2:
            self.vectors = self.vectors.reshape(len(rows), -1)
        self._by_doc: dict[str, list[int]] = {}
        self._texts: dict[str, str] | None = None
        self._stats = None
        self._before: dict[tuple[str, str], str] | None = None
        for i, (doc, _, _) in enumerate(rows):
            self._by_doc.setdefault(doc, []).append(i)

    @classmethod
    def build(cls, kb: Mapping[str, str], embedder=None, progress: str | None = None) -> "SentenceIndex":
        """Split every document of ``kb`` (``{doc: text}``, in its order) and embed all sentences in one
        batched call (``embedder.embed``, default `rag.retrieval.embed.passage_embedder`; ``progress``: a tqdm bar label, as
        `rag.retrieval.embed.MiniLMEmbedder.embed` takes it)."""
        rows = cls.rows_of(kb)
        if embedder is None:
            from rag.retrieval.embed import passage_embedder

            embedder = passage_embedder()
        vectors = embedder.embed([s for _, _, s in rows], progress) if rows else np.zeros((0, 384), np.float32)
        return cls(rows, vectors)

    @staticmethod
    def rows_of(kb: Mapping[str, str]) -> list[tuple[str, int, str]]:
        """``(doc, position, sentence)`` of every document of ``kb`` (`rag.voice.verify.split_sentences`), in order."""
        return [(doc, i, s) for doc, text in kb.items() for i, s in enumerate(split_sentences(text))]

    @property
    def texts(self) -> dict[str, str]:
        """``{doc: its sentences joined by spaces}``: the document text the answer scorer reads."""
        if self._texts is None:
            self._texts = {d: " ".join(self.rows[i][2] for i in ix) for d, ix in self._by_doc.items()}
        return self._texts

    @property
    def stats(self):
        """The KB's key-term sentence frequencies (`rag.voice.selection.TermStats`), computed once."""
        if self._stats is None:
            from rag.voice.selection import TermStats

            self._stats = TermStats.of(s for _, _, s in self.rows)
        return self._stats

    def contexts(self, candidates) -> list[str]:
        """For each ``(sentence, doc, ...)`` candidate, the sentence before it in its document ("" for the first
        sentence, or for text that is not one of the document's sentences)."""
        if self._before is None:  # (doc, sentence) -> the sentence before it; the first occurrence wins; built
            before: dict[tuple[str, str], str] = {}  # whole, then published: a thread never sees it half built
            for i, (doc, pos, s) in enumerate(self.rows):
                before.setdefault((doc, s), self.rows[i - 1][2] if pos > 0 else "")
            self._before = before
        return [self._before.get((doc, sentence), "") for sentence, doc, *_ in candidates]

    def of(self, doc: str) -> list[tuple[str, np.ndarray]]:
        """``(sentence, (384,) vector)`` of ``doc`` in order; [] for a document with none or not indexed."""
        return [(self.rows[i][2], self.vectors[i]) for i in self._by_doc.get(doc, [])]

    def save(self, jsonl: str | Path, npy: str | Path) -> None:
        """Write the rows (``{doc, position, text}`` per line) and the vectors, each atomically."""
        from rag.io import write_jsonl, write_npy

        write_jsonl(jsonl, [{"doc": d, "position": i, "text": s} for d, i, s in self.rows])
        write_npy(npy, self.vectors)

    @classmethod
    def load(cls, jsonl: str | Path, npy: str | Path) -> "SentenceIndex":
        """Read what `save` wrote; InputError naming the file and line for a row missing a field."""
        from rag.io import read_jsonl

        rows = [(r["doc"], int(r["position"]), r["text"])
                for r in read_jsonl(jsonl, required=("doc", "position", "text"))]
        return cls(rows, np.load(npy))
