"""Stage llm_first_token (issue 12's latency goal; FROZEN: needs the .[llm] extra): how soon a packaged model starts
answering a clinic turn, cold and warm, per thread count -> metrics/voice/llm_first_token.{json,md}.

For each of ``llm_first_token.servers`` (``llm.server``: which build of llama.cpp's server, `rag.llm.server.SERVERS`),
each of ``llm_first_token.contexts`` (``llm.context``: what the model is shown, `rag.voice.answer.shown_documents`)
and each of ``llm_first_token.threads``: a fresh local server (``llm_first_token.model``, RAM prompt cache on:
``llm.cache_ram_mib``, one slot) is started and timed (``start_s``: process start to /health ok, the model read from
disk); then every clinic question (``voice.queries``, rewritten as the chain does) is asked once through
`rag.voice.answer.answer_row` (the chain's prompt, schema and ``answer.mode``; the gate is not applied, so every
question calls the model; no turn deadline), then each once more. Reported: the first request's first token
(``cold``: nothing cached; with context ``knowledge_base`` the whole KB is read then), the other first requests
(``warm``: model loaded, the system prompt cached, the question and its passages new (``retrieved``) or the question
alone new (``knowledge_base``): what a caller's turn costs) and the repeats (``repeated``: the whole prompt
cached, as a benchmark that asks one prompt again measures), first token and total p50/p95 ms, and llama.cpp's
prompt tokens evaluated (``prompt_n``) per call. The load average before each server start is recorded.
"""
import os
import time

from common import ROOT, VOICE_METRICS, main, params, without_deadline

from rag import config
from rag.bench.compare import markdown_table
from rag.bench.latency import summary
from rag.eval.evaluate import embed_texts
from rag.io import write_json, write_text
from rag.llm.server import LocalServer
from rag.retrieval.chunk import load_kb
from rag.retrieval.search import PassageIndex
from rag.voice.answer import answer_row
from rag.voice.quarantine import allowed
from rag.voice.queries import load_queries, rewrite_queries


def median_or_none(values: list[int]) -> int | None:
    """Median (the upper one of an even count) of the calls that reported llama.cpp's timings; None when none did.
    A reply declined at its start (``{"source": "none"``) is closed before the server's last chunk, which carries
    the timings, so those calls are counted apart (``without_timings``), never as 0 tokens."""
    return sorted(values)[len(values) // 2] if values else None


def run() -> None:
    t0 = time.perf_counter()
    p = params()
    f = p["llm_first_token"]
    kb = ROOT / p["voice"]["kb"]
    index, docs = PassageIndex.from_folder(kb, config.hybrid_config(p), allowed(p)), load_kb(kb, allowed(p))
    queries = load_queries(ROOT / p["voice"]["queries"])
    texts = rewrite_queries(queries, config.rewrite_rules(p, index.passages))
    vectors = embed_texts(texts)
    out = {"model": f["model"], "answer_mode": p["answer"]["mode"], "cache_ram_mib": int(p["llm"]["cache_ram_mib"]),
           "questions": len(queries), "runs": {}}
    rows = []
    for server_kind, context, threads in ((s, c, t) for s in f["servers"] for c in f["contexts"] for t in f["threads"]):
        settings = config.answer_settings({**without_deadline(p),
                                           "llm": {**p["llm"], "context": context}}, 0.0)
        llm = {**p["llm"], "local_model": f["model"], "threads": int(threads), "n_parallel": 1, "server": server_kind}
        load = os.getloadavg()
        started = time.perf_counter()
        with LocalServer.from_params(llm) as server:
            start_s = time.perf_counter() - started
            calls = {"first": [], "repeated": []}
            for name in calls:
                for q in queries:
                    r = answer_row(q["id"], texts[q["id"]], index, vectors[q["id"]], 1.0, settings, docs,
                                   server.url)
                    calls[name].append({"id": q["id"], "first_token_ms": r["first_token_ms"],
                                        "total_ms": r["total_ms"], "error": r["error"],
                                        "prompt_n": (r["timings"] or {}).get("prompt_n")})
        cold, warm, repeated = calls["first"][:1], calls["first"][1:], calls["repeated"]

        def stats(cs):
            return {"first_token_ms": summary([c["first_token_ms"] for c in cs if c["first_token_ms"] is not None]),
                    "total_ms": summary([c["total_ms"] for c in cs if c["total_ms"] is not None]),
                    "prompt_n_median": median_or_none([c["prompt_n"] for c in cs if c["prompt_n"] is not None]),
                    "without_timings": sum(c["prompt_n"] is None for c in cs),
                    "errors": sum(c["error"] is not None for c in cs)}

        run_ = {"server": server_kind, "context": context, "threads": int(threads), "start_s": round(start_s, 2), "loadavg_1_5_15": [round(x, 2) for x in load],
                "cold": stats(cold), "warm": stats(warm), "repeated": stats(repeated), "calls": calls}
        out["runs"][f"{server_kind}/{context}/{threads}"] = run_
        for name in ("cold", "warm", "repeated"):
            s = run_[name]
            rows.append([server_kind, context, threads, run_["loadavg_1_5_15"][0], run_["start_s"], name, s["first_token_ms"]["n"],
                         f"{s['first_token_ms']['p50']:.0f} / {s['first_token_ms']['p95']:.0f}",
                         f"{s['total_ms']['p50']:.0f} / {s['total_ms']['p95']:.0f}",
                         "-" if s["prompt_n_median"] is None else s["prompt_n_median"], s["without_timings"],
                         s["errors"]])
        print(f"llm_first_token: {server_kind}, {context}, {threads} thread(s) done, {time.perf_counter() - t0:.0f} s", flush=True)
    out["runtime_s"] = round(time.perf_counter() - t0, 1)
    write_json(VOICE_METRICS / "llm_first_token.json", out)
    write_text(VOICE_METRICS / "llm_first_token.md",
               f"First token of {f['model']} on the {len(queries)} clinic questions (answer.mode {p['answer']['mode']}, "
               f"prompt cache {out['cache_ram_mib']} MiB, one slot, a fresh server per server build, context and thread count; cold = the first "
               f"request, warm = the other first requests, repeated = each question asked again). Runtime "
               f"{out['runtime_s']:.0f} s.\n\n"
               + markdown_table(["llm.server", "llm.context", "threads", "load (1 min) before", "server start s", "requests", "n",
                                 "first token p50 / p95 ms", "total p50 / p95 ms", "prompt tokens evaluated (median)",
                                 "replies without timings (declined)", "errors"], rows))
    print(open(VOICE_METRICS / "llm_first_token.md").read())


main(run)
