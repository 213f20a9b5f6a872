"""Stage asr_compare: what each recogniser's transcripts do to the voice chain, per question set.

The transcripts are the frozen `transcribe_engines` stage's (fixtures/asr/<engine>/<set>.jsonl; the fixture
questions spoken by piper, clean and, for the vet set, with 20 dB pink noise); ``typed`` is the reference row,
the words as said (``spoken``: no recogniser). Each engine's ``asr`` replaces the fixture's in the labelled
query rows, which then run through the chain exactly as in stages/selection.py: the shipped gate
(models/gate.json, fitted on the clinic fixture) applied unchanged, the clinic with its tables, the held-out
vet KB with tables off (`common.tables_off`), LLM off (the extractive pick speaks, ``select.design``).
Reported per engine and set: WER against ``spoken`` (`rag.eval.wer`), retrieval recall@1/@3 of the rewritten
transcripts (``retrieval.mode``), gate refusal precision/recall, factual accuracy and what was said, recogniser
latency (decode p50/p95, real-time factor, pocketsphinx's first partial), and how many transcripts equal the
fixture's own ``asr`` (pocketsphinx must match all: same audio, same recogniser). What each answer-selection design
(`rag.voice.selection.DESIGNS`, each at its shipped ``min_score``) says on the same transcripts is under ``designs``:
the recogniser and the pick measured together (issue 10). Writes metrics/voice/asr_compare.json and asr_compare.md.
"""
import time

from common import GATE_PATH, ROOT, VOICE_METRICS, answer_scorer, main, params, tables_off
from rag import config
from rag.bench.compare import markdown_table
from rag.bench.latency import summary
from rag.eval.evaluate import doc_runs, embed_texts, retrieval_metrics
from rag.eval.wer import wer
from rag.io import read_jsonl, write_json, write_text
from rag.retrieval.chunk import load_kb
from rag.retrieval.search import PassageIndex
from rag.retrieval.sentences import SentenceIndex
from rag.voice.abstain import refusal_metrics
from rag.voice.gate import Gate
from rag.voice.pipeline import gate_function, step_answer, step_final
from rag.voice import selection
from rag.voice.quarantine import allowed
from rag.voice.queries import load_queries, rewrite_queries

ASR = ROOT / "fixtures" / "asr"
TYPED = "typed"
SAID = ("factual_accuracy", "grounded_wrong_said", "unsupported_said", "answerable_refused")


def transcripts(engine: str, name: str, queries: list[dict]) -> tuple[list[dict], list[dict]]:
    """``(query rows with the engine's asr, its transcript rows)``; ``typed``: ``spoken`` as the asr."""
    if engine == TYPED:
        return [{**q, "asr": q["spoken"]} for q in queries], []
    rows = read_jsonl(ASR / engine / f"{name}.jsonl", ("id", "asr", "audio_s", "decode_ms", "first_partial_ms"))
    heard = {r["id"]: r["asr"] for r in rows}
    if set(heard) != {q["id"] for q in queries}:
        raise ValueError(f"{ASR / engine / name}.jsonl: ids differ from the fixture's")
    return [{**q, "asr": heard[q["id"]]} for q in queries], rows


def latency(rows: list[dict]) -> dict:
    """Recogniser latency over ``rows``: decode ms p50/p95, real-time factor (decode time / audio time, summed),
    first-partial ms p50/p95 (engines with partials only)."""
    if not rows:
        return {}
    partial = [r["first_partial_ms"] for r in rows if r["first_partial_ms"] is not None]
    return {"decode_ms": summary([r["decode_ms"] for r in rows]),
            "rtf": round(sum(r["decode_ms"] for r in rows) / 1000 / sum(r["audio_s"] for r in rows), 4),
            "first_partial_ms": summary(partial) if partial else None}


def run():
    t0 = time.perf_counter()
    p = params()
    a = p["abstain"]
    gate = Gate.load(GATE_PATH)
    hc = config.hybrid_config(p)
    kbs = {"clinic": p["voice"]["kb"], "vet": a["transfer_kb"]}
    index = {n: PassageIndex.from_folder(ROOT / kb, hc, allowed(p)) for n, kb in kbs.items()}
    docs = {n: load_kb(ROOT / kb, allowed(p)) for n, kb in kbs.items()}
    sentences = {n: SentenceIndex.build(d) for n, d in docs.items()}
    gates = {n: gate_function(gate, index[n], p) for n in kbs}
    sets = {  # name: (kb, params, the fixture's labelled queries with pocketsphinx's asr)
        "clinic": ("clinic", p, load_queries(ROOT / p["voice"]["queries"])),
        "vet_clean": ("vet", tables_off(p), load_queries(ROOT / a["transfer_queries"]["clean"])),
        "vet_noisy": ("vet", tables_off(p), load_queries(ROOT / a["transfer_queries"]["noisy"])),
    }
    scorers = {d: answer_scorer(p, d) for d in selection.DESIGNS}
    out, designs = {}, {}
    for engine in (TYPED, *p["speech"]["engines"]):
        out[engine] = {}
        for name, (kb, q_p, fixture) in sets.items():
            qs, rows = transcripts(engine, name, fixture)
            rules = config.rewrite_rules(q_p, index[kb].passages)
            texts = rewrite_queries(qs, rules)
            vectors = embed_texts(texts)
            ret = retrieval_metrics(qs, doc_runs(index[kb], texts, p["retrieval"]["mode"], vectors), ks=(1, 3))
            scores = {qid: gates[kb](texts[qid], vectors[qid]) for qid in texts}
            refusal = refusal_metrics(scores, {q["id"]: q["answerable"] for q in qs}, gate.tau)
            answers = step_answer(index[kb], qs, docs[kb], q_p, gate.tau, None, scores)
            by_design = {d: step_final(answers, qs, docs[kb], q_p, gate.tau, sentences[kb], sc)[1]
                         for d, sc in scorers.items()}
            final = by_design[p["select"]["design"]]
            designs.setdefault(engine, {})[name] = {d: {k: f[k] for k in SAID} for d, f in by_design.items()}
            fixture_asr = {q["id"]: q["asr"] for q in fixture}
            out[engine][name] = {
                **wer(((q["spoken"], q["asr"]) for q in qs), rules),
                "recall_at_1": ret["recall@1"], "recall_at_3": ret["recall@3"],
                "refusal_precision": refusal["precision"], "refusal_recall": refusal["recall"],
                **{k: final[k] for k in SAID},
                "same_as_fixture_asr": sum(q["asr"] == fixture_asr[q["id"]] for q in qs), "n": len(qs),
                "latency": latency(rows)}
            print(f"{engine} {name}: WER {out[engine][name]['wer']:.3f}, accuracy {final['factual_accuracy']:.3f}",
                  flush=True)
    psx = out.get("pocketsphinx")
    if psx and any(r["same_as_fixture_asr"] != r["n"] for r in psx.values()):
        raise ValueError("pocketsphinx transcripts differ from the fixtures' asr: the audio chain changed")
    write_json(VOICE_METRICS / "asr_compare.json", {"llm": "off (extractive pick)", "design": p["select"]["design"],
                                                     "tau": gate.tau, "results": out, "designs": designs,
                                                     "runtime_s": round(time.perf_counter() - t0, 1)})
    write_text(VOICE_METRICS / "asr_compare.md", markdown(out, designs))
    print(markdown(out, designs))


def markdown(out: dict, designs: dict) -> str:
    rows = [[e, n, r["wer"], r["recall_at_1"], r["recall_at_3"], r["refusal_precision"], r["refusal_recall"],
             r["factual_accuracy"], r["grounded_wrong_said"], r["answerable_refused"]]
            for e, by_set in out.items() for n, r in by_set.items()]
    lat = [[e, n, r["latency"]["decode_ms"]["p50"], r["latency"]["decode_ms"]["p95"], r["latency"]["rtf"],
            r["latency"]["first_partial_ms"]["p50"] if r["latency"]["first_partial_ms"] else "none (whole utterance)"]
           for e, by_set in out.items() for n, r in by_set.items() if r["latency"]]
    return ("# Recognisers compared (piper audio; vet noisy: 20 dB pink noise; LLM off, shipped gate, vet KB tables "
            "off)\n\n`typed` = the words as said (no recogniser). WER: lower case, punctuation dropped, number words "
            "as digits on both sides, fillers kept.\n\n"
            + markdown_table(["engine", "set", "WER", "R@1", "R@3", "refusal P", "refusal R", "factual accuracy",
                              "grounded wrong said", "answerable refused"], rows)
            + "\nRecogniser latency from the one run of the frozen transcribe_engines stage that wrote the transcripts "
              "(not a benchmark: 2 CPU threads on a machine that may have been busy; decode = first audio fed to final "
              "transcript, model loaded; RTF = decode time / audio time):\n\n"
            + markdown_table(["engine", "set", "decode p50 ms", "decode p95 ms", "RTF", "first partial p50 ms"], lat)
            + "\nEach answer-selection design at its shipped min_score on the same transcripts (factual accuracy / "
              "grounded wrong said / answerable refused):\n\n"
            + markdown_table(["engine", "set", *selection.DESIGNS],
                             [[e, n, *(f"{r[d]['factual_accuracy']:.3f} / {r[d]['grounded_wrong_said']} / "
                                       f"{r[d]['answerable_refused']}" for d in selection.DESIGNS)]
                              for e, by_set in designs.items() for n, r in by_set.items()]))


main(run)
