"""Stage transfer: abstention signals fitted on the clinic fixture, applied unchanged to the vet KB.

For each signal (rag.voice.abstain) tau is fitted on the clinic questions (rewritten transcripts) with
``threshold.policy``/``epsilon``; the combined model is fitted on the clinic rows only. Both are then
applied as is to the held-out vet KB, clean and noisy ASR. Writes metrics/voice/transfer.json and
metrics/voice/transfer.md (every signal), and the headline metrics/voice/vet.json (what is said on the vet KB,
clean and noisy: `answer_key` below); the default signal is picked on the TRANSFER sets only.

``answer_key``: what is said on every set when the LLM is down (the extractive fallback, gated by
``abstain.signal`` at its fixture tau), scored against each question's ``facts``: the held-out check
of the verifier's extractive pick (`rag.voice.answer.extractive`), never tuned on.
"""
import time


from common import ROOT, VOICE_METRICS, answer_scorer, main, params
from rag import config
from rag.voice import abstain
from rag.eval.evaluate import doc_runs, embed_texts, retrieval_metrics
from rag.retrieval.chunk import load_kb
from rag.voice.quarantine import allowed
from rag.retrieval.embed import embedder_id
from rag.voice.gate import fit_gate
from rag.voice.pipeline import question_signals, step_answer, step_final
from rag.io import write_json, write_text
from rag.voice.queries import load_queries, raw_queries, rewrite_queries
from rag.retrieval.search import PassageIndex

FIT, TRANSFER = "fixture", ("transfer_clean", "transfer_noisy")
VET_HEADLINE = ("factual_accuracy", "grounded_wrong_said", "unsupported_said", "refusal_precision", "refusal_recall",
                "answerable_refused")


def run():
    t0 = time.perf_counter()
    p = params()
    a = p["abstain"]
    hc = config.hybrid_config(p)
    sets = {FIT: (p["voice"]["kb"], p["voice"]["queries"]),
            "transfer_clean": (a["transfer_kb"], a["transfer_queries"]["clean"]),
            "transfer_noisy": (a["transfer_kb"], a["transfer_queries"]["noisy"])}
    indexes = {kb: PassageIndex.from_folder(ROOT / kb, hc, allowed(p)) for kb in {kb for kb, _ in sets.values()}}
    feats, labels, retrieval = {}, {}, {}
    for name, (kb, qpath) in sets.items():
        queries = load_queries(ROOT / qpath)
        labels[name] = {q["id"]: q["answerable"] for q in queries}
        retrieval[name] = {}
        rules = config.rewrite_rules(p, indexes[kb].passages)
        for form, texts in (("raw", raw_queries(queries)), ("rewritten", rewrite_queries(queries, rules))):
            vectors = embed_texts(texts)
            m = retrieval_metrics(queries, doc_runs(indexes[kb], texts, "dense", vectors), ks=(1, 3))
            retrieval[name][form] = {"recall@1": m["recall@1"], "recall@3": m["recall@3"]}
        feats[name] = question_signals(indexes[kb], texts, vectors, p)  # rewritten: the gate's input
    results, taus, gates = {}, {}, {}
    t = p["threshold"]
    for sig in abstain.ALL_SIGNALS:  # each signal's gate fitted on the clinic fixture as the threshold stage fits it
        gates[sig], taus[sig] = fit_gate(feats[FIT], labels[FIT], sig, t["policy"], float(t["epsilon"]), int(a["seed"]),
                                         embedder_id(), config.gate_retrieval(p), {})
        scores = {n: gates[sig].scores(f) for n, f in feats.items()}
        results[sig] = {n: {"auroc": round(abstain.auroc(scores[n], labels[n]), 6),
                            **abstain.refusal_metrics(scores[n], labels[n], taus[sig]["tau"])} for n in sets}
    gate = gates[a["signal"]]
    answer_key = {}
    for name, (kb, qpath) in sets.items():
        queries, docs = load_queries(ROOT / qpath), load_kb(ROOT / kb, allowed(p))
        answers = step_answer(indexes[kb], queries, docs, p, gate.tau, None, gate.scores(feats[name]))
        answer_key[name] = step_final(answers, queries, docs, p, gate.tau, scorer=answer_scorer(p))[1]
    best = abstain.pick_signal(results, TRANSFER, a["goal"])
    reached = [s for s in results if all(abstain.meets_goal(results[s][n], a["goal"]) for n in TRANSFER)]
    coef = dict(zip(abstain.SIGNALS, (round(c, 4) for c in gates["combined"].model.coef)))
    out = {"policy": p["threshold"]["policy"], "epsilon": float(p["threshold"]["epsilon"]), "goal": a["goal"],
           "tau": {s: t["tau"] for s, t in taus.items()}, "signals": results, "retrieval_dense": retrieval,
           "combined_coef_standardised": coef, "best_on_transfer": best, "reaching_goal": reached,
           "answer_key": {"signal": gate.signal, "llm": "down (extractive fallback)", **answer_key},
           "runtime_s": round(time.perf_counter() - t0, 1)}
    write_json(VOICE_METRICS / "transfer.json", out)
    write_json(VOICE_METRICS / "vet.json", {  # headline: what is said on the held-out vet KB
        n.removeprefix("transfer_"): {k: answer_key[n][k] for k in VET_HEADLINE} for n in TRANSFER})
    write_text(VOICE_METRICS / "transfer.md", markdown(out, list(sets)))
    print(markdown(out, list(sets)))


def markdown(out, set_names):
    lines = [f"# Abstention transfer (tau fitted on `fixture`, policy {out['policy']}, eps {out['epsilon']})", "",
             "| signal | tau | set | AUROC | refusal P | refusal R | refused | answerable refused |",
             "|---|---|---|---|---|---|---|---|"]
    for sig, per_set in out["signals"].items():
        for n in set_names:
            r = per_set[n]
            lines.append(f"| {sig} | {out['tau'][sig]:.4f} | {n} | {r['auroc']:.3f} | {r['precision']:.3f} | "
                         f"{r['recall']:.3f} | {r['refused']} | {len(r['answerable_refused'])} "
                         f"{' '.join(r['answerable_refused'])} |")
    lines += ["", "| set | raw R@1 | raw R@3 | rewritten R@1 | rewritten R@3 |", "|---|---|---|---|---|"]
    for n, r in out["retrieval_dense"].items():
        lines.append(f"| {n} | {r['raw']['recall@1']:.3f} | {r['raw']['recall@3']:.3f} | "
                     f"{r['rewritten']['recall@1']:.3f} | {r['rewritten']['recall@3']:.3f} |")
    lines += ["", f"What is said with the LLM down (extractive fallback, gate {out['answer_key']['signal']}):", "",
              "| set | factual accuracy | grounded wrong said | unsupported said | extractive | refused |",
              "|---|---|---|---|---|---|"]
    for n in set_names:
        k = out["answer_key"][n]
        lines.append(f"| {n} | {k['factual_accuracy']:.3f} | {k['grounded_wrong_said']} | {k['unsupported_said']} | "
                     f"{k['n_extractive']} | {k['n_refused']} |")
    g = out["goal"]
    lines += ["", f"Goal on both transfer sets: refusal P >= {g['precision']}, R >= {g['recall']}, "
              f"<= {g['max_answerable_refused']} answerable refused. Reaching it: "
              f"{', '.join(out['reaching_goal']) or 'none'}. Best on transfer: **{out['best_on_transfer']}**.", ""]
    return "\n".join(lines)


main(run)
