"""Stage ko_generate_models (issue 12, part 4; FROZEN: needs the .[llm] extra, `make repro` does not rerun it):
each packaged model of ``ko_gen_models.models`` (`rag.llm.registry`) answering a larger sample of Korean test
questions than stage ko_generate, through the same grid runner (`ko_runs.generate`: [문서 n] citations bound by
the schema, verifier, extractive fallback, gold-included and gold-excluded).

``ko_gen_models.sample`` / ``seed`` / ``grid`` replace those of ``ko_gen`` (the rest of ``ko_gen`` is shared);
each model gets its own cold server (``ko_gen_models.servers`` of them at once, each asking a share of the
questions: `ko_runs.generate_on_servers`) with ``ko_gen_models.threads`` threads and ``ko_gen_models.cache_ram_mib``
of prompt cache (within a question the calls share the instructions' prefix). What is said passes the model's
answer gate (``ko_gen.answer_gate``: its confidence, read from the tokens' log-probabilities, which every call asks
for and every row keeps). The same replies are also decided by the verifier alone (no gate) under each sentence
support of `alternatives` (`ko_runs.redecide`, no new call): the rule at the shipped ``min_question_share`` and at 0,
and the learned support (``ko_gen.support_model``), so the supports are compared on the same replies. A model whose
server does not start stops the stage (no metrics from fallback answers). Writes metrics/ko/generation_models.json and .md (numbers only)
and data/ko/generation_models.jsonl (one row per call, KorQuAD text: git-ignored, never committed).

``--redecide``: no LLM; the replies of data/ko/generation_models.jsonl decided again with today's verifier and
supports (the shown passages rebuilt from the rows' passage ids), the run's settings and timings kept from
metrics/ko/generation_models.json: what a change to the decision rules does to the same replies.
"""
from __future__ import annotations

import json
from pathlib import Path

from common import ROOT, args, main, params
from ko_runs import (gate_label, generate_on_servers, korquad, redecide, score_cells, stored_replies, support_label,
                     table, without_passages)

from rag.bench.squad import passage_text
from rag.io import write_json, write_jsonl, write_text
from rag.ko import tokenize as korean
from rag.ko.answer import AnswerGate, ShareSupport
from rag.ko.support import from_params as support_from_params


def alternatives(p: dict) -> dict:
    """The sentence supports every reply is also decided under, by name: the rule at ``ko_gen.min_question_share``
    and at 0 (an answer's sentence needs one question term), and the learned ``ko_gen.support_model`` bound to the
    KorQuAD passages."""
    ko, g = p["ko"], p["ko_gen"]
    texts = [passage_text(x, ko["index_title"]) for x in korquad(ko)[0]]
    learned = support_from_params({**g, "support": "learned"}, korean.kiwi_tokens_batch(texts), ROOT)
    return {f"share {g['min_question_share']}": ShareSupport(float(g["min_question_share"])),
            "share 0": ShareSupport(0.0), f"learned (min_score {learned.min_score:.3f})": learned}


def decided_again(p: dict, g: dict) -> tuple[dict, dict]:
    """``({model: rows with their shown passages}, {model: run meta})`` from the last run's files (``--redecide``)."""
    ko = p["ko"]
    by_model: dict[str, list[dict]] = {}
    for r in stored_replies(ko, g, "generation_models.jsonl", ["model", "raw_answer", "raw_citations", "error"]):
        by_model.setdefault(r["model"], []).append(r)
    runs = json.loads((Path(ko["metrics_dir"]) / "generation_models.json").read_text(encoding="utf-8"))["runs"]
    return by_model, {m: {k: v for k, v in runs[m].items() if k not in ("cells", "cells_by_support")}
                      for m in by_model}


def run() -> None:
    p = params()
    ko, m = p["ko"], p["ko_gen_models"]
    g = {**p["ko_gen"], "sample": m["sample"], "seed": m["seed"], "grid": m["grid"]}
    again_only = args().redecide
    replies, supports = {}, None  # model -> (rows, cells, meta); the supports, by name (`alternatives`)
    if again_only:
        by_model, metas = decided_again(p, g)
        supports = alternatives(p)  # the shipped support is one of them: the learned one, or the rule at its share
        shipped = next(v for v in supports.values() if v.name == g["support"])
    for model in m["models"]:
        if again_only:
            gate = AnswerGate.from_params(g, {"url": "", "local_model": model})
            rows = redecide(by_model[model], shipped, gate)
            replies[model] = rows, score_cells(rows), {
                **metas[model], "support": support_label(g, shipped), "answer_gate": gate_label(gate),
                "redecided": "its stored replies decided again by --redecide, no new call"}
        else:
            llm = {**p["llm"], "url": "", "local_model": model, "n_ctx": int(g["n_ctx"]),
                   "threads": int(m["threads"]), "cache_ram_mib": int(m["cache_ram_mib"]), "n_parallel": 1}
            print(f"ko_generate_models: {model}", flush=True)
            replies[model] = generate_on_servers(p, g, llm, "test", int(m["servers"]))
            if not replies[model][2]["server_started"]:
                raise RuntimeError(f"ko_generate_models: the server for {model} did not start (see the warning above)")
    # Built only after every server's process is forked: kiwi's threads in this process would leave a held lock in
    # a forked child (session 44: both children hung on a futex when the supports were built first).
    supports = supports or alternatives(p)
    runs, rows_all, md = {}, [], []
    for model, (rows, cells, meta) in replies.items():
        again = {name: score_cells(redecide(rows, support)) for name, support in supports.items()}
        runs[model] = {**meta, "cells": cells, "cells_by_support": again}
        rows_all += [{"model": model, **{k: v for k, v in r.items() if k != "model"}} for r in without_passages(rows)]
        md.append(f"## {model}\n\n{meta['llm']}, {meta['threads']} thread(s), prompt cache {m['cache_ram_mib']} MiB, "
                  f"load average {meta['load_average_at_start']} at the start; {meta['calls']} calls, "
                  f"{meta['runtime_s']} s, mean call {meta['llm_call_ms_mean']} ms"
                  + (f" ({meta['redecided']})" if "redecided" in meta else "") + ".\n\n"
                  f"Shipped sentence support, {meta['support']}; answer gate ({model}'s `ko_gen.answer_gate`): "
                  f"{meta['answer_gate']}:\n\n{table(cells)}\n"
                  + "".join(f"The same replies decided under support {name}, the verifier alone (no answer gate; "
                            f"`ko_runs.redecide`, no new call):\n\n"
                            f"{table(c)}\n" for name, c in again.items()))
    write_jsonl(Path(ko["data_dir"]) / "generation_models.jsonl", rows_all)
    write_json(Path(ko["metrics_dir"]) / "generation_models.json",
               {"sample": m["sample"], "seed": m["seed"], "grid": m["grid"], "runs": runs})
    write_text(Path(ko["metrics_dir"]) / "generation_models.md",
               f"Grounded Korean answers by each packaged model, KorQuAD 1.0 dev test split, {m['sample']} sampled "
               f"questions (seed {m['seed']}); retriever and rules as stage ko_generate (generation.md). Rates over "
               f"all n questions of a cell; [95 % CI] = percentile bootstrap over the questions. In gold_excluded a "
               f"correct system abstains.\n\n" + "\n".join(md))


main(run, lambda ap: ap.add_argument("--redecide", action="store_true",
                                     help="decide the stored replies again under every support, no LLM call"))
