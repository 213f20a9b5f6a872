"""Stage ko_answer_gate (issue 12; FROZEN: needs the .[llm] extra, `make repro` does not rerun it): choose a
generator's Korean answer gate (``ko_gen.answer_gate``) on TRAIN-split replies, so the test split that stage
ko_generate_models reports stays unseen.

``ko_answer_gate.model`` answers ``sample`` train questions (``seed``) with ``prompt`` at ``top_k``, gold-included
and gold-excluded, through the grid runner of the Korean stages (`ko_runs.generate`: every call asks for the
tokens' log-probabilities), on ``servers`` cold servers in parallel (``threads`` each; each asks every n-th
question of the one sample). `rag.ko.gate_choice.choose_answer_gate` then picks the support and confidence
thresholds (the best span hit with hallucination <= ``max_hallucination``; adopted if it gains ``min_gain`` over
the verifier alone), and the gate in params is decided on the same replies, so a reader sees whether params hold
the choice. Writes metrics/ko/answer_gate.json and .md (numbers only) and data/ko/answer_gate_replies.jsonl (one
row per call, KorQuAD text: git-ignored, never committed).

``--rechoose``: no LLM; the replies of data/ko/answer_gate_replies.jsonl chosen on again (the shown passages
rebuilt from their ids), the run's settings and timings kept from metrics/ko/answer_gate.json.
"""
from __future__ import annotations

import json
from pathlib import Path

from common import ROOT, args, main, params, params_error
from ko_runs import (gate_label, generate_on_servers, korquad, redecide, score_cells, stored_replies, table,
                     without_passages)

from rag.bench.squad import passage_text
from rag.io import write_json, write_jsonl, write_text
from rag.ko import tokenize as korean
from rag.ko.answer import AnswerGate
from rag.ko.gate_choice import choose_answer_gate, confidence_auroc
from rag.ko.support import from_params as support_from_params

REPLIES = "answer_gate_replies.jsonl"


def settings(p: dict) -> tuple[dict, dict]:
    """``(g, llm)``: ``ko_gen`` with this stage's sample, seed and one-cell grid, and the server settings of its model.
    Raises InputError naming the key for a bad value."""
    a = p["ko_answer_gate"]
    for key in ("sample", "servers", "threads", "top_k"):
        if not isinstance(a[key], int) or a[key] < 1:
            raise params_error(f"ko_answer_gate.{key} must be an integer >= 1, got {a[key]!r}")
    if a["split"] == "test":  # held-out discipline: ko_generate_models reports the gate on the test split
        raise params_error("ko_answer_gate.split must not be test: the gate is reported there")
    for key, values in (("max_hallucination", [a["max_hallucination"]]), ("min_gain", [a["min_gain"]]),
                        ("min_supports", a["min_supports"] if isinstance(a["min_supports"], list) else [None])):
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0 for v in values):
            raise params_error(f"ko_answer_gate.{key} must be in [0, 1] (min_supports: a list of such), "
                               f"got {a[key]!r}")
    g = {**p["ko_gen"], "sample": a["sample"], "seed": a["seed"], "grid": {a["prompt"]: [a["top_k"]]}}
    llm = {**p["llm"], "url": "", "local_model": a["model"], "n_ctx": int(g["n_ctx"]), "threads": int(a["threads"]),
           "cache_ram_mib": int(a["cache_ram_mib"]), "n_parallel": 1}
    return g, llm


def stored(p: dict, g: dict) -> tuple[list[dict], dict]:
    """``(rows with their shown passages, run meta)`` from the last run's files (``--rechoose``)."""
    ko = p["ko"]
    rows = stored_replies(ko, g, REPLIES, ["raw_answer", "raw_citations", "error", "answer_logprobs",
                                           "gold_excluded", "golds"])
    meta = json.loads((Path(ko["metrics_dir"]) / "answer_gate.json").read_text(encoding="utf-8"))["run"]
    return rows, meta


def fmt(x) -> str:
    """A threshold as the report shows it: "–" for none, 5 decimals for a float (the JSON keeps it whole)."""
    return "–" if x is None else f"{x:.5f}".rstrip("0").rstrip(".") if isinstance(x, float) else str(x)


def report(a: dict, meta: dict, choice: dict, auc: dict, params_gate: str, params_cells: dict,
           chosen_cells: dict, agrees: bool) -> str:
    c, b = choice["chosen"], choice["baseline"]
    rows = "".join(f"| {fmt(x['min_support'])} | {fmt(x['min_mean_logprob'])} | {x['span_hit']:.2f} | "
                   f"{x['hallucination']:.2f} | {x['llm_said']} |\n" for x in choice["frontier"])
    return (f"Choosing the Korean answer gate of {a['model']} (`ko_gen.answer_gate`; issue 12), KorQuAD 1.0 dev "
            f"**{a['split']}** split, {meta['questions']} questions (seed {a['seed']}), {a['prompt']} at top "
            f"{a['top_k']}, gold-included and gold-excluded; {meta['calls']} calls on {meta['servers']} server(s) of "
            f"{meta['threads']} thread(s), {meta['runtime_s']} s, mean call {meta['llm_call_ms_mean']} ms, load "
            f"average {meta['load_average_at_start']} at the start"
            + (f" ({meta['rechosen']})" if "rechosen" in meta else "") + ".\n\n"
            f"Rule (`rag.ko.gate_choice.choose_answer_gate`): the best gold-included span hit with gold-excluded "
            f"hallucination <= {a['max_hallucination']}; adopt when it beats the verifier alone by >= {a['min_gain']}. "
            f"{choice['points']} gates scored.\n\n"
            f"- verifier alone: span hit {b['span_hit']:.2f}, hallucination {b['hallucination']:.2f}, LLM answers "
            f"said {b['llm_said']}\n"
            f"- **chosen**: support >= {fmt(c['min_support'])}, mean token logprob >= {fmt(c['min_mean_logprob'])}: "
            f"span hit {c['span_hit']:.2f}, hallucination {c['hallucination']:.2f}, LLM answers said {c['llm_said']}; "
            f"gain {c['span_hit'] - b['span_hit']:+.2f}: **{'adopt' if choice['adopt'] else 'do not adopt'}**\n"
            f"- params (`ko_gen.answer_gate` for {a['model']}): {params_gate}; "
            f"{'the same decisions as the chosen gate on every reply' if agrees else '**not the chosen decisions**'}\n"
            f"- the confidence's AUROC: right vs gold-excluded answers {fmt(auc['right_vs_gold_excluded'])} "
            f"({auc['right']} / {auc['gold_excluded']}), right vs wrong gold-included {fmt(auc['right_vs_wrong'])} "
            f"({auc['right']} / {auc['wrong']})\n\n"
            f"Best gate within the bound at each support:\n\n"
            f"| min_support | min_mean_logprob | span hit | hallucination | LLM answers said |\n|---|---|---|---|---|\n"
            f"{rows}\nThe chosen gate's cells (intervals: bootstrap over the questions):\n\n{table(chosen_cells)}\n"
            f"The gate in params on the same replies:\n\n{table(params_cells)}")


def run() -> None:
    p = params()
    ko, a = p["ko"], p["ko_answer_gate"]
    g, llm = settings(p)
    if args().rechoose:
        rows, meta = stored(p, g)
        meta = {**meta, "rechosen": "its stored replies chosen on again by --rechoose, no new call"}
    else:
        print(f"ko_answer_gate: {a['model']}, {a['sample']} {a['split']} questions on {a['servers']} servers",
              flush=True)
        rows, _, meta = generate_on_servers(p, g, llm, a["split"], a["servers"])
        if not meta["server_started"]:
            raise RuntimeError("ko_answer_gate: a server did not start (see the warning above)")
    texts = [passage_text(x, ko["index_title"]) for x in korquad(ko)[0]]
    support = support_from_params(g, korean.kiwi_tokens_batch(texts), ROOT)
    choice = choose_answer_gate(rows, support, [float(x) for x in a["min_supports"]], float(a["max_hallucination"]),
                                float(a["min_gain"]))
    c = choice["chosen"]
    chosen_gate = AnswerGate(c["min_support"], c["min_mean_logprob"])
    params_gate = AnswerGate.from_params(g, {"url": "", "local_model": a["model"]})
    chosen_rows, params_rows = redecide(rows, support, chosen_gate), redecide(rows, support, params_gate)
    agrees = [r["final"]["say"] for r in chosen_rows] == [r["final"]["say"] for r in params_rows]
    auc = confidence_auroc(rows)
    write_jsonl(Path(ko["data_dir"]) / REPLIES, without_passages(rows))
    write_json(Path(ko["metrics_dir"]) / "answer_gate.json",
               {"settings": a, "run": meta, **choice, "confidence_auroc": auc,
                "params_gate": gate_label(params_gate), "params_gate_agrees": agrees,
                "chosen_cells": score_cells(chosen_rows), "params_cells": score_cells(params_rows)})
    write_text(Path(ko["metrics_dir"]) / "answer_gate.md",
               report(a, meta, choice, auc, gate_label(params_gate), score_cells(params_rows),
                      score_cells(chosen_rows), agrees))


if __name__ == "__main__":
    main(run, lambda ap: ap.add_argument("--rechoose", action="store_true",
                                         help="choose again on the stored replies, no LLM call"))
