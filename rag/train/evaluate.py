"""Before/after retrieval of an embedder on HeySQuAD's report half: the evaluation of a fine-tuned retriever
(`rag.train.finetune`) with the packaged one as "before". Needs no PyTorch."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from rag.bench.compare import evaluate_matrix, select
from rag.bench.heysquad import SOURCES, article_split, as_passages, as_transcripts
from rag.io import read_jsonl
from rag.retrieval.search import HybridConfig, PassageIndex
from rag.voice.queries import raw_queries


def report_half(data_dir: str | Path, config: HybridConfig, embedder,
                modes: Sequence[str] = ("dense", "hybrid_phonetic"), passage_embedder=None) -> dict:
    """Retrieval on HeySQuAD's report half (odd articles, `rag.bench.heysquad.article_split`) of the prepared files
    in ``data_dir`` (passages.jsonl with ``article``, queries.jsonl): the report half's questions against all 311 paragraphs,
    questions embedded by ``embedder`` (a `rag.retrieval.embed.MiniLMEmbedder`, or `rag.retrieval.e5.E5Side`) and
    paragraphs by ``passage_embedder`` (default: ``embedder``; e5 embeds the two sides differently).

    Returns ``{form: {mode: {recall@1, recall@3, recall@10, mrr@10, ndcg@10}}}`` for typed / human / machine, raw
    transcripts. Raises InputError naming a file that lacks a field.
    """
    data = Path(data_dir)
    passages = read_jsonl(data / "passages.jsonl", required=("_id", "text", "article"))
    queries = read_jsonl(data / "queries.jsonl", required=("id", "relevant", *SOURCES))
    split = article_split(passages, queries)
    report = [q for q in queries if split[q["id"]] == "report"]
    index = PassageIndex(as_passages(passages), (passage_embedder or embedder).embed([r["text"] for r in passages]), config)
    names = ["recall@1", "recall@3", "recall@10", "mrr@10", "ndcg@10"]
    return {source: select(evaluate_matrix(index, report, {"raw": raw_queries(as_transcripts(report, source))},
                                           modes, ks=(1, 3, 10), embedder=embedder), names)["raw"]
            for source in SOURCES}
