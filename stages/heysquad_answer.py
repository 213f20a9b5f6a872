"""Stage heysquad_answer: does the extractive fallback read out the sentence that holds the answer?

On HeySQuAD's 1,002 questions (typed / human ASR / machine ASR, rewritten as in the voice track), the
sentences of the paragraphs are ranked by `rag.voice.answer.pick_sentence` and each pick is scored against SQuAD's
gold answer spans (`rag.bench.heysquad.sentence_picks`). Two settings: ``gold`` (the question's own paragraph: the
pick alone) and ``retrieved`` (the top ``retrieval.k`` passages in ``retrieval.mode``: what the voice
pipeline reads). Sentence rankings compared: ``heysquad.pick_modes``. For the configured mode and the
retrieved setting, the picks said at each ``heysquad.pick_min_cosine`` (`rag.bench.heysquad.selective_accuracy`):
the evidence for ``answer.min_sentence_cosine``. Also the retrieved setting's pick hit per half by article (even:
the half that chooses, odd: the half that reports) for each sentence fusion (``answer.sentence_fusion``: RRF or the
convex combination, `rag.retrieval.search.FUSIONS`). Writes ``{heysquad.metrics_dir}``/answer.json and answer.md.
"""
import time
from dataclasses import replace

import numpy as np

from common import ROOT, heysquad_index, main, params
from rag import config
from rag.voice.answer import retrieve
from rag.bench.compare import markdown_table
from rag.eval.evaluate import embed_texts
from rag.bench.heysquad import SOURCES, article_split, as_transcripts, selective_accuracy, sentence_picks
from rag.io import InputError, write_json, write_text
from rag.voice.queries import rewrite_queries
from rag.retrieval.search import FUSIONS, MODES
from rag.retrieval.sentences import SentenceIndex


def checked_grid(h: dict, settings) -> tuple[list[str], list[float]]:
    """The sentence rankings to compare (``heysquad.pick_modes`` plus ``retrieval.mode``, whose picks the
    grid is read on) and the sorted cosine grid (``heysquad.pick_min_cosine`` plus ``answer.min_sentence_cosine``).
    Raises InputError naming the params key for an unknown mode or a value that is not a cosine."""
    where = ROOT / "params.yaml"
    modes, grid = h["pick_modes"], h["pick_min_cosine"]
    if not isinstance(modes, list) or not all(m in MODES for m in modes):
        raise InputError(f"{where}: heysquad.pick_modes must be a list of {MODES}, got {modes!r}")
    if not isinstance(grid, list) or not all(
            isinstance(t, (int, float)) and not isinstance(t, bool) and -1.0 <= t <= 1.0 for t in grid):
        raise InputError(f"{where}: heysquad.pick_min_cosine must be a list of cosines in [-1, 1], got {grid!r}")
    return list(dict.fromkeys([*modes, settings.mode])), sorted({float(t) for t in grid} | {settings.min_sentence_cosine})


def run():
    p = params()
    h = p["heysquad"]
    t0 = time.perf_counter()
    passages, queries, index = heysquad_index(p, "answers")
    rules = config.verify_rules(p)
    settings = config.answer_settings(p, 0.0)
    hybrid = settings.sentence_hybrid  # how the extractive pick ranks sentences (answer.sentence_stemmer)
    modes, grid = checked_grid(h, settings)
    sentences = SentenceIndex.build({r["_id"]: r["text"] for r in passages})
    accuracy, selective, by_fusion = {}, {}, {}
    half = {q: "even" if part == "train" else "odd" for q, part in article_split(passages, queries).items()}
    for source in SOURCES:
        texts = rewrite_queries(as_transcripts(queries, source), config.rewrite_rules(p, index.passages))
        vectors = embed_texts(texts)
        docs = {"gold": {q["id"]: q["relevant"] for q in queries},
                "retrieved": {q["id"]: retrieve(index, texts[q["id"]], vectors[q["id"]], settings)[1] for q in queries}}
        accuracy[source] = {}
        for setting, by_query in docs.items():
            accuracy[source][setting] = {}
            for mode in modes:
                picks = sentence_picks(queries, texts, vectors, by_query, sentences, rules, mode, hybrid)
                accuracy[source][setting][mode] = {key: round(float(np.mean([r[key] for r in picks])), 6)
                                                   for key in ("hit", "ceiling", "typed")}
                if setting == "retrieved" and mode == settings.mode:
                    selective[source] = {f"{t:.2f}": selective_accuracy(picks, t) for t in grid}
                    shipped = picks
        by_fusion[source] = {}
        for fusion in FUSIONS:  # the shipped fusion's picks are the ones just scored
            picks = shipped if fusion == hybrid.fusion else sentence_picks(
                queries, texts, vectors, docs["retrieved"], sentences, rules, settings.mode, replace(hybrid, fusion=fusion))
            by_fusion[source][fusion] = {h: round(float(np.mean([r["hit"] for r in picks if half[r["id"]] == h])), 6)
                                         for h in ("even", "odd")}
    write_json(ROOT / h["metrics_dir"] / "answer.json", {
        "questions": len(queries), "sentences": len(sentences.rows),
        "retrieval": {"mode": settings.mode, "k": settings.k}, "min_sentence_cosine": settings.min_sentence_cosine,
        "accuracy": accuracy, "selective": selective, "sentence_fusion": settings.sentence_fusion,
        "sentence_fusion_by_half": by_fusion})
    rows = [[source, setting, mode, m["hit"], m["ceiling"], m["typed"]]
            for source, by_setting in accuracy.items() for setting, by_mode in by_setting.items()
            for mode, m in by_mode.items()]
    sel_rows = [[source, t + (" (answer.min_sentence_cosine)" if float(t) == settings.min_sentence_cosine else ""),
                 m["said"], m["hit_said"], m["hit_refused"], m["wrong_said"], m["right_refused"]]
                for source, by_t in selective.items() for t, m in by_t.items()]
    write_text(ROOT / h["metrics_dir"] / "answer.md",
               f"HeySQuAD dev-common, {len(queries)} questions: does the extractive pick hold a gold answer?\n"
               f"gold = the question's own paragraph; retrieved = top {settings.k} passages ({settings.mode}). "
               "hit = the pick holds an answer; ceiling = some candidate sentence does; typed = the question asks "
               "for a known answer type.\n\n"
               + markdown_table(["questions", "passages", "sentence ranking", "hit", "ceiling", "typed"], rows)
               + f"\nSaying only picks with cosine >= min (retrieved passages, {settings.mode} ranking):\n\n"
               + markdown_table(["questions", "min cosine", "said", "hit of said", "hit of refused", "wrong said",
                                 "right refused"], sel_rows)
               + f"\nPick hit per half by article (even chooses, odd reports), retrieved passages, {settings.mode} "
                 f"sentence ranking fused by each `answer.sentence_fusion` (shipped: {settings.sentence_fusion}):\n\n"
               + markdown_table(["questions", *(f"{f} {h}" for f in FUSIONS for h in ("even", "odd"))],
                                [[source, *(by_f[f][h] for f in FUSIONS for h in ("even", "odd"))]
                                 for source, by_f in by_fusion.items()]))
    print(f"heysquad_answer: {len(queries)} questions, {len(sentences.rows)} sentences, {time.perf_counter() - t0:.1f} s")


main(run)
