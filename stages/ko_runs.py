"""The Korean grounded-answer grid of stages ko_generate and ko_generate_models (one definition for both).

``generate(p, g, llm)`` draws ``g["sample"]`` test questions with ``g["seed"]``, retrieves with BM25 over Kiwi
content morphemes (k1 ``g["bm25_k1"]``) on every passage, and runs the grid ``g["grid"]`` = {prompt: [top_k, ...]}
in both conditions (gold_included; gold_excluded: BM25 rebuilt without the question's gold passage) on one
server started from ``llm`` (`rag.voice.pipeline.llm_url`). Per question, calls run prompt -> condition -> top_k
ascending, so llama.cpp's prompt cache (if on) reuses the shared prefix (the order is fixed, so runs repeat).
Each passage is shown as at most ``g["passage_max_chars"]`` characters of its sentences that share most question
morphemes (`rag.ko.answer.focus`).
"""
from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

from common import ROOT, params_error

from rag.bench.squad import load_answers, passage_text
from rag.io import read_jsonl
from rag.ko import tokenize as korean
from rag.ko.answer import AnswerGate, KoSettings, answer_ko, decide_reply, focus, score_rows
from rag.ko.support import from_params as support_from_params
from rag.retrieval.indexes import BM25Index
from rag.voice.pipeline import llm_url

CONDITIONS = ("gold_included", "gold_excluded")


def table(cells: dict) -> str:
    """Markdown: one row per cell, raw and final rates, the final span and hallucination rates with their 95 %
    bootstrap intervals (`rag.ko.answer.score_rows`)."""
    head = ("| prompt | top_k | condition | n | gold in top_k | raw: abstain | raw: cit. valid | raw: halluc. | "
            "raw: span | raw: no output | final: abstain | final: cit. valid | final: halluc. [95 % CI] | "
            "final: span [95 % CI] | final: llm/abst/extr/fb |\n" + "|---" * 15 + "|\n")
    lines = []
    for c in cells.values():
        r, f, st = c["raw"], c["final"], c["final_status"]
        hl, hh = f["hallucination_ci"]
        sl, sh = f["span_match_ci"]
        lines.append(f"| {c['prompt']} | {c['top_k']} | {c['condition']} | {c['n']} | {c['gold_retrieved_rate']:.2f} | "
                     f"{r['abstention_rate']:.2f} | {r['citation_validity']:.2f} | {r['hallucination_rate']:.2f} | "
                     f"{r['span_match_rate']:.2f} | {r['no_output_rate']:.2f} | {f['abstention_rate']:.2f} | "
                     f"{f['citation_validity']:.2f} | {f['hallucination_rate']:.2f} [{hl:.2f}, {hh:.2f}] | "
                     f"{f['span_match_rate']:.2f} [{sl:.2f}, {sh:.2f}] | "
                     f"{st.get('llm', 0)}/{st.get('abstained', 0)}/{st.get('extractive', 0)}/"
                     f"{st.get('fallback_abstained', 0)} |\n")
    return head + "".join(lines)


def korquad(ko: dict) -> tuple[list[dict], list[dict], dict, dict]:
    """``(passages, queries, qrels, gold answer texts)`` of the Korean track (``ko.data_dir`` from stage ko_prepare,
    the answers from ``ko.squad_path``); InputError naming the file for a bad row."""
    data = Path(ko["data_dir"])
    return (read_jsonl(data / "passages.jsonl", required=["_id", "title", "text"]),
            read_jsonl(data / "queries.jsonl", required=["_id", "text", "split"]),
            json.loads((data / "qrels.json").read_text(encoding="utf-8")), load_answers(ko["squad_path"]))


def generate(p: dict, g: dict, llm: dict, split: str = "test", part: tuple[int, int] = (0, 1)
             ) -> tuple[list[dict], dict, dict]:
    """Run the grid on ``split``'s sample (``part`` = (i, n): only its questions i, i + n, ... in sample order, so n
    processes with a server each share one sample); returns ``(rows, cells, meta)``: one row per call (KorQuAD text:
    keep out of git), the cells' `score_rows` metrics keyed ``prompt/k=K/condition``, and the run's settings,
    runtime (s), mean call time (ms), load average before the server's start and ``server_started`` (False: no
    server, every call failed as ``unreachable`` and the fallback answered). Raises InputError for a sample outside
    1..the split's questions."""
    ko = p["ko"]
    t_start = time.perf_counter()
    passages, queries, qrels, golds = korquad(ko)
    pool = [q for q in queries if q["split"] == split]
    if not 0 < int(g["sample"]) <= len(pool):
        raise params_error(f"ko_gen.sample must be in 1..{len(pool)} ({split} questions), got {g['sample']}")
    order = {q["_id"]: i for i, q in enumerate(pool)}
    sample = sorted(random.Random(int(g["seed"])).sample(pool, int(g["sample"])),
                    key=lambda q: order[q["_id"]])[part[0]::part[1]]

    texts = [passage_text(x, ko["index_title"]) for x in passages]
    tokens = dict(zip(texts, korean.kiwi_tokens_batch(texts)))

    def tokenize(text: str) -> list[str]:  # passages pre-tokenized once; questions on demand
        return tokens[text] if text in tokens else korean.kiwi_tokens(text)

    k1, b = float(g["bm25_k1"]), float(ko["bm25_b"])
    full = BM25Index(texts, tokenize, k1=k1, b=b)
    support = support_from_params(g, tokens.values(), ROOT)
    depth = max(k for ks in g["grid"].values() for k in ks)
    cap = int(g["passage_max_chars"])
    pid_row = {x["_id"]: i for i, x in enumerate(passages)}

    rows, call_ms = [], []
    load_at_start = os.getloadavg()[0]
    with llm_url({"llm": llm}, warn=lambda m: print(f"warning: {m}", flush=True)) as url:
        started = url is not None
        for qi, q in enumerate(sample):
            gold_ids = set(qrels[q["_id"]])
            keep = [i for i, x in enumerate(passages) if x["_id"] not in gold_ids]
            excl = BM25Index([texts[i] for i in keep], tokenize, k1=k1, b=b)
            ranked = {"gold_included": [i for i, _ in full.top_k(q["text"], depth)],
                      "gold_excluded": [keep[i] for i, _ in excl.top_k(q["text"], depth)]}
            for prompt, ks in g["grid"].items():
                s = KoSettings.from_params(g, llm, prompt, support)
                for cond in CONDITIONS:
                    for k in sorted(ks):
                        idx = ranked[cond][:k]
                        ptexts = [focus(q["text"], passages[i]["text"], cap) for i in idx]
                        res = answer_ko(url, q["text"], ptexts, s)
                        if res["total_ms"] is not None:
                            call_ms.append(res["total_ms"])
                        row = {"id": q["_id"], "prompt": prompt, "condition": cond, "k": k,
                               "gold_excluded": cond == "gold_excluded",
                               "retrieved": [passages[i]["_id"] for i in idx],
                               "gold_retrieved": any(pid_row[x] in idx for x in gold_ids),
                               "question": q["text"], "golds": golds.get(q["_id"], []), "passages": ptexts,
                               **res}
                        rows.append(row)
            print(f"  question {qi + 1}/{len(sample)}: {time.perf_counter() - t_start:.0f} s", flush=True)

    cells = score_cells(rows)
    meta = {"split": split, "questions": len(sample), "seed": g["seed"], "calls": len(rows), "server_started": started,
            "runtime_s": round(time.perf_counter() - t_start, 1),
            "llm_call_ms_mean": round(sum(call_ms) / len(call_ms), 1) if call_ms else 0.0,
            "llm": llm["url"] or f"packaged {llm['local_model']} (llama.cpp, local; rag.llm.registry)",
            "threads": int(llm["threads"]), "load_average_at_start": round(load_at_start, 2),
            "retriever": f"BM25 (k1={k1}, b={b}) over {korean.tokenizer_version('kiwi')}, "
                         f"index_title={ko['index_title']}, all {len(passages)} passages",
            "passage_max_chars": cap, "max_len": g["max_len"], "grid": g["grid"], "support": support_label(g, support),
            "answer_gate": gate_label(AnswerGate.from_params(g, llm))}
    return rows, cells, meta


def _generate_part(args: tuple) -> tuple[list[dict], dict]:
    p, g, llm, split, part = args
    rows, _, meta = generate(p, g, llm, split, part)
    return rows, meta


def generate_on_servers(p: dict, g: dict, llm: dict, split: str = "test", servers: int = 1
                        ) -> tuple[list[dict], dict, dict]:
    """`generate` on ``servers`` cold servers at once (one process each, ``llm["threads"]`` threads each; server i
    asks the sample's questions i, i + servers, ...): the same ``(rows, cells, meta)``, rows in sample order, meta's
    runtime the slowest server's, its calls and questions summed, ``servers`` added and ``server_started`` False if
    any server did not start. One server runs in this process, as `generate`."""
    if servers == 1:
        rows, cells, meta = generate(p, g, llm, split)
        return rows, cells, {**meta, "servers": 1}
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(servers) as pool:
        parts = list(pool.map(_generate_part, [(p, g, llm, split, (i, servers)) for i in range(servers)]))
    position = {}
    for i, (rows, _) in enumerate(parts):  # part i holds the sample's questions i, i + servers, ...
        for j, qid in enumerate(dict.fromkeys(r["id"] for r in rows)):
            position[qid] = i + j * servers
    rows = sorted((r for rows, _ in parts for r in rows), key=lambda r: position[r["id"]])  # stable within a question
    metas = [m for _, m in parts]
    timed = [m for m in metas if m["calls"]]
    return rows, score_cells(rows), {
        **metas[0], "servers": servers, "questions": sum(m["questions"] for m in metas),
        "calls": sum(m["calls"] for m in metas), "runtime_s": max(m["runtime_s"] for m in metas),
        "server_started": all(m["server_started"] for m in metas),
        "llm_call_ms_mean": round(sum(m["llm_call_ms_mean"] * m["calls"] for m in timed)
                                  / max(1, sum(m["calls"] for m in timed)), 1)}


def score_cells(rows: list[dict]) -> dict:
    """`rag.ko.answer.score_rows` per cell, keyed ``prompt/k=K/condition`` in the order the rows came."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["prompt"], r["k"], r["condition"]), []).append(r)
    return {f"{prompt}/k={k}/{cond}": {"prompt": prompt, "top_k": k, "condition": cond,
                                       "gold_retrieved_rate": round(sum(r["gold_retrieved"] for r in rs) / len(rs), 4),
                                       **score_rows(rs)}
            for (prompt, k, cond), rs in groups.items()}


def support_label(g: dict, support) -> str:
    """How the shipped sentence support of ``ko_gen`` is named in the metrics ("learned (models/ko-support.json,
    min_score 0.313)", "share (min_question_share 0.6)")."""
    if support.name == "share":
        return f"share (min_question_share {support.min_score})"
    return f"learned ({g['support_model']}, min_score {support.min_score:.3f})"


def gate_label(gate: AnswerGate) -> str:
    """How an answer gate is named in the metrics ("the verifier alone", "support >= 0.0, mean token logprob >=
    -0.0258")."""
    parts = ([] if gate.min_support is None else [f"support >= {gate.min_support}"]) + \
        ([] if gate.min_mean_logprob is None else [f"mean token logprob >= {gate.min_mean_logprob}"])
    return ", ".join(parts) or "the verifier alone"


def redecide(rows: list[dict], support, gate: AnswerGate = AnswerGate()) -> list[dict]:
    """The same replies decided again (`rag.ko.answer.decide_ko`) under another sentence ``support``
    (`rag.ko.answer.ShareSupport` at some ``min_question_share``, or `rag.ko.support.LearnedSupport`) and answer
    ``gate`` (default: the verifier alone): what the verifier and fallback would have said, with no new LLM call.
    Rows need their ``passages`` (and ``answer_logprobs`` for a gate that reads them; a row without them fails it)."""
    return [{**r, "final": decide_reply(r, support, gate)} for r in rows]


def stored_replies(ko: dict, g: dict, name: str, required: list[str]) -> list[dict]:
    """The rows of ``ko.data_dir``/``name`` (a stage's stored replies, `without_passages`) with their shown passages
    rebuilt from the passage ids (`rag.ko.answer.focus` at ``g["passage_max_chars"]``); InputError naming the file
    for a row without ``required``."""
    passages = {x["_id"]: x for x in korquad(ko)[0]}
    return [{**r, "passages": [focus(r["question"], passages[i]["text"], int(g["passage_max_chars"]))
                               for i in r["retrieved"]]}
            for r in read_jsonl(Path(ko["data_dir"]) / name, required=["question", "retrieved", *required])]


def without_passages(rows: list[dict]) -> list[dict]:
    """The rows as written to data/ko/*.jsonl: the shown passage texts left out (they are in data/ko/passages.jsonl)."""
    return [{k: v for k, v in r.items() if k != "passages"} for r in rows]
