"""Before/after retrieval of an embedder on HeySQuAD's report half: the evaluation of a fine-tuned retriever
(`rag.train.finetune`) with the packaged one as "before"; and the sentence pick of a fine-tuned answer-sentence
encoder (`span_labels`, `pick_hit`). Needs no PyTorch."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Collection, Mapping, Sequence

import numpy as np

from rag.bench.compare import evaluate_matrix, select
from rag.bench.heysquad import SOURCES, article_split, as_passages, as_transcripts, read_prepared
from rag.retrieval.search import HybridConfig, PassageIndex
from rag.train.pairs import holds_span
from rag.voice.queries import raw_queries


def report_half(data_dir: str | Path, config: HybridConfig, embedder,
                modes: Sequence[str] = ("dense", "hybrid_phonetic"), passage_embedder=None,
                question_ids: Collection[str] | None = None) -> dict:
    """Retrieval on HeySQuAD's report half (odd articles, `rag.bench.heysquad.article_split`) of the prepared files
    in ``data_dir`` (passages.jsonl with ``article``, queries.jsonl): the report half's questions against all 311 paragraphs,
    questions embedded by ``embedder`` (a `rag.retrieval.embed.MiniLMEmbedder`, or `rag.retrieval.e5.E5Side`) and
    paragraphs by ``passage_embedder`` (default: ``embedder``; e5 embeds the two sides differently).
    ``question_ids``: score these questions instead (e.g. a held-out fold of the train half, `train_folds`).

    Returns ``{form: {mode: {recall@1, recall@3, recall@10, mrr@10, ndcg@10}}}`` for typed / human / machine, raw
    transcripts. Raises InputError naming a file that lacks a field; ValueError if ``question_ids`` names none.
    """
    passages, queries = read_prepared(data_dir)
    split = article_split(passages, queries)
    if question_ids is None:
        report = [q for q in queries if split[q["id"]] == "report"]
    else:
        report = [q for q in queries if q["id"] in question_ids]
        if not report:
            raise ValueError("report_half: question_ids names no question of the data set")
    index = PassageIndex(as_passages(passages), (passage_embedder or embedder).embed([r["text"] for r in passages]), config)
    names = ["recall@1", "recall@3", "recall@10", "mrr@10", "ndcg@10"]
    return {source: select(evaluate_matrix(index, report, {"raw": raw_queries(as_transcripts(report, source))},
                                           modes, ks=(1, 3, 10), embedder=embedder), names)["raw"]
            for source in SOURCES}


def convex_hybrid(data_dir: str | Path, config: HybridConfig, embedder, passage_embedder, grid: Sequence[float],
                  choose_form: str = "human", texts_of: Callable[[list[dict]], dict[str, str]] = raw_queries,
                  sentence_sides: tuple | None = None) -> dict:
    """hybrid_phonetic's three lists on HeySQuAD (dense, BM25 and phonetic BM25, each its top ``config.depth``; each
    form's questions as ``texts_of`` makes them (``{id: text}``: the raw transcripts, `rag.voice.queries.raw_queries`,
    or the voice chain's rewrite, `rag.voice.queries.rewrite_queries`), after `rag.io.normalise_text`, embedded so
    too; all 311 paragraphs searched), fused by RRF and by the
    convex combination of min-max scores, compared by `compare_fusions` (weights chosen on the train half's
    ``choose_form`` questions, scored on the report half). Neither fusion applies `PassageIndex.ranking`'s promotions
    (`promote_exact_hit`, `promote_quoted`); RRF here matches `report_half`'s hybrid_phonetic to 4 places on HeySQuAD.
    ``embedder`` / ``passage_embedder`` as `report_half`. An encoder trained on the train half (the fine-tuned e5) has
    its weight chosen on questions it has seen: a bias towards the dense list that can only cost the report half.
    ``sentence_sides``: (question side, sentence side) of a sentence encoder (e.g. the answer-sentence e5,
    `rag.retrieval.e5.E5Side`) for a fourth list: paragraphs by the best cosine of any of their sentences
    (`rag.voice.verify.split_sentences`), top ``config.depth``; its RRF weight as configured is 1. A question side that
    is ``embedder`` itself reuses the dense list's question vectors (one embedding per question, as served).
    Returns `compare_fusions`'s dict.
    """
    from rag.io import normalise_text

    passages, queries = read_prepared(data_dir)
    split = article_split(passages, queries)
    index = PassageIndex(as_passages(passages), passage_embedder.embed([r["text"] for r in passages]), config)
    if sentence_sides is not None:
        from rag.retrieval.indexes import best_sentence_ranking
        from rag.voice.verify import split_sentences

        owner, sentences = zip(*((i, x) for i, r in enumerate(passages) for x in split_sentences(r["text"])))
        owner, sentence_vectors = np.array(owner), sentence_sides[1].embed(list(sentences))
    lists = {}
    for source in SOURCES:
        texts = {i: normalise_text(t) for i, t in texts_of(as_transcripts(queries, source)).items()}
        ids = sorted(texts)
        vectors = embedder.embed([texts[i] for i in ids])
        per_query = {i: [index.dense_ranking(v, config.depth), index.bm25_ranking(texts[i], config.depth),
                         index.phonetic_ranking(texts[i], config.depth)] for i, v in zip(ids, vectors)}
        if sentence_sides is not None:
            same = sentence_sides[0] is embedder   # the dense list's own question vectors: not embedded twice
            for i, q in zip(ids, vectors if same else sentence_sides[0].embed([texts[i] for i in ids])):
                per_query[i].append(best_sentence_ranking(owner, sentence_vectors, q, len(passages), config.depth))
        n_lists = len(per_query[ids[0]])
        lists[source] = {part: [{i: per_query[i][m] for i in ids if split[i] == part} for m in range(n_lists)]
                         for part in ("train", "report")}
    weights = [*config.weights, config.phonetic_weight] + ([1.0] if sentence_sides is not None else [])
    return compare_fusions(lists, {q["id"]: {d: 1 for d in q["relevant"]} for q in queries},
                           [x.id for x in index.passages], weights, config.rrf_k, grid, choose_form)


def compare_fusions(lists: Mapping[str, Mapping[str, Sequence[Mapping]]], qrels: Mapping[str, Mapping[str, int]],
                    passage_ids: Sequence[str], rrf_weights: Sequence[float], rrf_k: float, grid: Sequence[float],
                    choose_form: str) -> dict:
    """Three fusions of the same ranked lists, like for like: RRF at the given weights and k (as configured), RRF with
    weights chosen from ``grid`` (`weight_grid`, k kept), and the convex combination of min-max normalised scores
    (`rag.retrieval.learned_fusion.fuse_convex`, Bruch et al. 2023) with weights chosen from the same ``grid``; each
    choice by MRR@10 on ``lists[choose_form]["train"]`` only (`search_fusion`; ties: the grid's earlier direction),
    all scored on every form's "report" part.

    lists: ``{form: {"train" | "report": [ {query id: ranking (passage index, score)} per list ]}}``; qrels:
    ``{query id: {passage id: grade}}``; passage_ids: index -> id. Weights are directions (scale-free: divided by
    their largest). Returns ``{"weights": {"rrf_tuned", "convex"}, "chosen_on", "train_mrr@10": {fusion: v},
    "report_mrr@10": {form: {"rrf", "rrf_tuned", "convex"}}}``.
    """
    from rag.eval.metrics import evaluate_run, to_run
    from rag.retrieval.learned_fusion import fuse, fuse_convex, search_fusion, weight_grid

    def mrr(form, part, fusion):
        ls = lists[form][part]
        fused = (fuse(ls, rrf_k, rrf_weights, 10) if fusion == "rrf" else fuse(ls, rrf_k, chosen["rrf_tuned"], 10)
                 if fusion == "rrf_tuned" else fuse_convex(ls, chosen["convex"], 10))
        return round(evaluate_run({i: qrels[i] for i in ls[0]}, to_run(fused, list(passage_ids)), ks=(10,))["mrr@10"], 4)

    train = lists[choose_form]["train"]
    directions = weight_grid(grid, len(train))
    chosen = {name: search_fusion({"-": train}, {i: qrels[i] for i in train[0]}, passage_ids, directions, [rrf_k],
                                  10, "mrr@10", fusion=fusion)[0]["weights"]
              for name, fusion in (("rrf_tuned", "rrf"), ("convex", "convex"))}
    fusions = ("rrf", "rrf_tuned", "convex")
    return {"weights": {n: [round(x, 4) for x in w] for n, w in chosen.items()},
            "chosen_on": f"train half, {choose_form}, MRR@10",
            "train_mrr@10": {f: mrr(choose_form, "train", f) for f in fusions},
            "report_mrr@10": {form: {f: mrr(form, "report", f) for f in fusions} for form in lists}}


def fidelity(path: str | Path, fp32_vectors, texts, e5, threads: int) -> float:
    """Mean cosine (over all rows) of the e5 encoder at ``path``'s unit vectors of ``texts`` = (queries, passages),
    each a list of str, to ``fp32_vectors`` = ((n_q, 384), (n_p, 384)) float32 unit rows of the fp32 export's, rounded
    to 6 decimals: how much of a fine-tune a smaller copy (8-bit or float16 weights) keeps. ``e5``: the
    `rag.retrieval.e5.E5File` whose vocabulary and token embeddings the encoder reads."""
    from rag.retrieval.e5 import E5Embedder

    e = E5Embedder(path, e5, threads=threads)
    q, p = e.embed_queries(texts[0]), e.embed_passages(texts[1])
    total = (q * fp32_vectors[0]).sum(1).sum() + (p * fp32_vectors[1]).sum(1).sum()
    return round(float(total / (len(q) + len(p))), 6)


def smallest_faithful(copies: dict, order: Sequence[str], min_fidelity: float, stage: str) -> str:
    """The first kind in ``order`` (smallest file first) whose ``copies[kind]["fidelity"]`` (`fidelity`) is at least
    ``min_fidelity``. Raises RuntimeError, prefixed ``stage``, naming every kind's fidelity when none is."""
    kind = next((k for k in order if copies[k]["fidelity"] >= min_fidelity), None)
    if kind is None:
        raise RuntimeError(f"{stage}: no copy keeps min_fidelity {min_fidelity}: "
                           + ", ".join(f"{k} {copies[k]['fidelity']}" for k in order))
    return kind


FORMS = ("typed", "human", "machine")
MODES = ("dense", "hybrid_phonetic")


def mean_std(models: Sequence[dict], kind: str = "q") -> dict:
    """``{form: {mode: {"mrr@10": [mean, std], "recall@1": [mean, std]}}}`` over ``models`` (rows holding
    ``{kind: {"metrics": report_half(...)}}``), rounded to 4 decimals; std is the sample standard deviation, 0.0 for
    one model. Raises statistics.StatisticsError for no models, KeyError for a row without ``kind``."""
    import statistics

    out = {}
    for form in FORMS:
        for mode in MODES:
            for m in ("mrr@10", "recall@1"):
                v = [r[kind]["metrics"][form][mode][m] for r in models]
                out.setdefault(form, {}).setdefault(mode, {})[m] = [round(statistics.mean(v), 4),
                                                                    round(statistics.stdev(v), 4) if len(v) > 1 else 0.0]
    return out


def fusion_mean_std(fusions: Sequence[dict]) -> dict:
    """``{form: {fusion: [mean, std]}}`` of the report half's MRR@10 over ``fusions`` (one `compare_fusions` dict per
    seed; fusion: rrf, rrf_tuned, convex), rounded to 4 decimals; std is the sample standard deviation, 0.0 for one.
    Raises statistics.StatisticsError for none, KeyError for a dict without ``report_mrr@10``."""
    import statistics

    out = {}
    for form in FORMS:
        for fusion in ("rrf", "rrf_tuned", "convex"):
            v = [r["report_mrr@10"][form][fusion] for r in fusions]
            out.setdefault(form, {})[fusion] = [round(statistics.mean(v), 4),
                                                round(statistics.stdev(v), 4) if len(v) > 1 else 0.0]
    return out


def report_table(results: dict, mean_key: str, label: Callable[[dict], str],
                 kinds: Sequence[str] = ("fp32", "q"), before: str = "before (packaged)") -> str:
    """Markdown MRR@10 table of a fine-tuning stage's ``results`` on the report half (``before``: `report_half`;
    ``models``: rows with ``{kind: {"metrics": ...}}``): rows "before", each model × kind (named
    ``label(model row)``), and the mean ± std in ``results[mean_key]`` (a `mean_std`, labelled with ``kinds[-1]``,
    the kind it was taken over); columns: form × mode. ``before`` labels the first row."""
    from rag.bench.compare import markdown_table

    rows = [[before, "", *(results["before"][fm][md]["mrr@10"] for fm in FORMS for md in MODES)]]
    for r in results["models"]:
        for name in kinds:
            rows.append([label(r), name, *(r[name]["metrics"][fm][md]["mrr@10"] for fm in FORMS for md in MODES)])
    ms = results[mean_key]
    rows.append(["mean ± std over seeds", kinds[-1], *(f"{ms[fm][md]['mrr@10'][0]:.3f} ± {ms[fm][md]['mrr@10'][1]:.3f}"
                                            for fm in FORMS for md in MODES)])
    return ("HeySQuAD report half (odd articles, 474 questions, against all 311 paragraphs): MRR@10, raw transcripts.\n\n"
            + markdown_table(["model", "weights", *(f"{fm} {md}" for fm in FORMS for md in MODES)], rows))


def span_labels(candidates: Sequence[tuple[str, str]], answers: Sequence[str], gold: str) -> np.ndarray:
    """(len(candidates),) bool: each ``(sentence, passage id)`` candidate is a sentence of the ``gold`` paragraph
    holding one of the gold ``answers`` spans (case-insensitive substring): the answer sentence of SQuAD-style data,
    as the answer scorers are trained (stage fit_selection). The same span in another paragraph is not an answer."""
    return np.array([d == gold and holds_span(s, answers) for s, d in candidates], dtype=bool)


def pick_hit(groups: Sequence[Mapping], cosines: Callable[[str, Sequence[str]], np.ndarray]) -> float:
    """Share of ``groups`` (``{"query", "sentences", "y"}``: candidate sentences and their `span_labels`) whose
    best-scored sentence by ``cosines(query, sentences)`` (one float per sentence; ties: the first) is an answer,
    not rounded; a group with no answer among its candidates, or no candidate, counts as a miss. Raises ValueError
    for no groups."""
    if not groups:
        raise ValueError("no groups to score")
    return float(np.mean([bool(g["sentences"]) and bool(g["y"][int(np.argmax(cosines(g["query"], g["sentences"])))])
                          for g in groups]))
