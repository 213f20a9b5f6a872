"""Stage llm_context (issue 12; FROZEN: needs the .[llm] extra): what the model is shown, ``llm.context``
``retrieved`` (the top-k passages) against ``knowledge_base`` (every document whole, the same prompt prefix for every
question: `rag.voice.answer.shown_documents`), through the whole chain on stage llm_models' sets (clinic as heard
and typed, vet clean and noisy with the clinic's tables off; shipped gate, ``select`` as in params), beside the chain
with the LLM off.

Each model of ``llm_context.models`` on each server build of ``llm_context.servers`` (``llm.server``), ``answer.mode`` as in params, ``llm_context.threads`` threads, one slot, RAM
prompt cache off (the slot still reuses the prefix it holds: what ``knowledge_base`` relies on), a cold server per
context and set (so each set's first call reads its KB's prefix), no turn deadline. Writes
metrics/voice/llm_context.json and .md (llm_models' summary per run: LLM answers kept and right, factual accuracy,
grounded wrong said, first token and total p50 / p95 over the calls made).
"""
import copy
import shutil
import tempfile
import time

from common import GATE_PATH, VOICE_METRICS, main, params, without_deadline
from llm_models import SETS, run_set
from rag.bench.compare import markdown_table
from rag.io import write_json, write_text
from rag.llm.server import free_port, llama_server_binary
from rag.voice.gate import Gate


def run():
    t0 = time.perf_counter()
    p = params()
    c = p["llm_context"]
    if "llama-server" in c["servers"]:
        llama_server_binary()  # raises here, not as a silent LLM-off run inside the chain (`rag.voice.pipeline.llm_url`)
    gate = Gate.load(GATE_PATH)
    out = {"models": list(c["models"]), "servers": list(c["servers"]), "answer_mode": p["answer"]["mode"], "threads": int(c["threads"]),
           "select_design": p["select"]["design"], "select_judge": p["select"]["judge"], "runs": {}}
    rows = []
    tmp = tempfile.mkdtemp()
    runs = [(None, None, "llm_off")] + [(m, s, context) for m in c["models"] for s in c["servers"]
                                        for context in c["contexts"]]
    for model, server_kind, context in runs:
        for name in SETS:
            pm = copy.deepcopy(without_deadline(p))
            pm["llm"].update(threads=int(c["threads"]), cache_ram_mib=0, n_parallel=1)
            if context == "llm_off":
                pm["llm"]["url"] = f"http://127.0.0.1:{free_port()}"  # nothing listens: the chain with the LLM down
            else:
                pm["llm"].update(url="", local_model=model, context=context, server=server_kind)
            key = f"{context}/{name}" if model is None else f"{model}/{server_kind}/{context}/{name}"
            r = out["runs"][key] = run_set(name, pm, gate, tmp)
            lat = r["latency"]
            rows.append([model or "-", server_kind or "-", context, name, r["kept"], r["kept_right"], f"{r['factual_accuracy']:.3f}",
                         r["grounded_wrong_said"], r["answerable_refused"],
                         f"{lat['first_token_ms']['p50']:.0f} / {lat['first_token_ms']['p95']:.0f}",
                         f"{lat['total_ms']['p50']:.0f} / {lat['total_ms']['p95']:.0f}", r["wall_s"]])
            print(key, r["kept"], r["kept_right"], r["factual_accuracy"], r["wall_s"], flush=True)
    shutil.rmtree(tmp)
    out["runtime_s"] = round(time.perf_counter() - t0, 1)
    write_json(VOICE_METRICS / "llm_context.json", out)
    write_text(VOICE_METRICS / "llm_context.md",
               f"What each model ({', '.join(c['models'])}) is shown (llm.context) through the chain (answer.mode {p['answer']['mode']}, "
               f"select.design {p['select']['design']}, select.judge {p['select']['judge']}, shipped gate, "
               f"{c['threads']} thread(s), one slot, RAM prompt cache off, a cold server per context and set, no turn "
               f"deadline; vet: tables off). First token over the calls made: each set's first call is cold. "
               f"Runtime {out['runtime_s']:.0f} s.\n\n"
               + markdown_table(["model", "llm.server", "llm.context", "set", "LLM answers kept", "kept and right", "factual accuracy",
                                 "grounded wrong said", "answerable refused", "first token p50 / p95 ms",
                                 "total p50 / p95 ms", "wall s"], rows))
    print(open(VOICE_METRICS / "llm_context.md").read())


if __name__ == "__main__":
    main(run)
