"""Stage llm_models (issue 12, part 3; FROZEN: needs the .[llm] extra and the 0.5B parts, `make repro` does not
rerun it): each local model (`rag.llm.registry`) x answer.mode {free, choose} answering the clinic questions (as
heard, and typed: the words as said) and the vet questions through the whole chain (`rag.voice.pipeline.run_chain`:
shipped gate, ``select.design`` and ``select.judge`` as in params, verifier, fallback), beside the same chain with
the LLM off (nothing listening at ``llm.url``).

Every run starts its own cold server with the RAM prompt cache off (``llm_models.cache_ram_mib``) and
``llm_models.threads`` threads; the load average at its start is recorded. No turn deadline
(`common.without_deadline`): the model's own answers are measured, not how many arrive in 3 s.
The vet KB runs with the clinic's tables off (as stage transfer). Writes metrics/voice/llm_models.json and .md.
"""
import copy
import os
import shutil
import tempfile
import time
from pathlib import Path

from common import GATE_PATH, ROOT, VOICE_METRICS, main, params, tables_off, without_deadline
from rag.bench.compare import markdown_table
from rag.eval.scoring import has_facts
from rag.io import read_jsonl, write_json, write_jsonl, write_text
from rag.llm.server import free_port
from rag.voice.gate import Gate
from rag.voice.pipeline import run_chain

SETS = {"clinic": ("voice", "kb", ("voice", "queries")),
        "clinic_typed": ("voice", "kb", ("voice", "queries")),  # the words as said (``spoken``), no recogniser
        "vet_clean": ("abstain", "transfer_kb", ("abstain", "transfer_queries", "clean")),
        "vet_noisy": ("abstain", "transfer_kb", ("abstain", "transfer_queries", "noisy"))}


def summarise(result: dict, queries: list[dict]) -> dict:
    """Answers kept (status llm), of those right (every fact said), factual accuracy, grounded-but-wrong, LLM errors
    and latency (ms, p50/p95 over the calls made)."""
    q = {x["id"]: x for x in queries}
    kept = [a for a in result["answers"] if a["status"] == "llm"]
    f = result["final"]
    return {"kept": len(kept), "kept_right": sum(q[a["id"]]["answerable"] and has_facts(a["say"], q[a["id"]]["facts"])
                                                 for a in kept),
            "factual_accuracy": f["factual_accuracy"], "grounded_wrong_said": f["grounded_wrong_said"],
            "answerable_refused": f["answerable_refused"], "reasons": f["reasons"], "latency": result["latency"]}


def run_set(name: str, pm: dict, gate: Gate, tmp: str | Path) -> dict:
    """Set ``name`` of `SETS` through the chain with params ``pm`` (``llm`` and ``answer`` as the caller set them; a
    vet set with the clinic's tables off, a typed set's questions written under ``tmp``): `summarise`'s dict with
    ``wall_s`` and the load average at the start."""
    section, kb_key, q_keys = SETS[name]
    pm = tables_off(pm) if name.startswith("vet") else pm
    path = pm
    for k in q_keys:
        path = ROOT / path[k] if k == q_keys[-1] else path[k]
    if name.endswith("_typed"):
        typed = Path(tmp) / f"{name}.jsonl"
        write_jsonl(typed, [{**q, "asr": q["spoken"]} for q in read_jsonl(path)])
        path = typed
    load = os.getloadavg()
    start = time.perf_counter()
    result = run_chain(ROOT / pm[section][kb_key], path, pm, gate)
    return {**summarise(result, read_jsonl(path)), "wall_s": round(time.perf_counter() - start, 1),
            "loadavg_1_5_15": [round(x, 2) for x in load]}


def run():
    t0 = time.perf_counter()
    p = params()
    lm = p["llm_models"]
    gate = Gate.load(GATE_PATH)
    out = {"threads": int(lm["threads"]), "cache_ram_mib": int(lm["cache_ram_mib"]),
           "select_design": p["select"]["design"], "select_judge": p["select"]["judge"], "runs": {}}
    rows = []
    variants = [("llm_off", None)] + [(m, mode) for m in lm["models"] for mode in ("free", "choose")]
    tmp = tempfile.mkdtemp()
    for model, mode in variants:
        for name in SETS:
            pm = copy.deepcopy(without_deadline(p))
            pm["llm"].update(threads=int(lm["threads"]), cache_ram_mib=int(lm["cache_ram_mib"]), n_parallel=1)
            if mode is None:
                pm["llm"]["url"] = f"http://127.0.0.1:{free_port()}"  # nothing listens: the chain with the LLM down
            else:
                pm["llm"].update(url="", local_model=model)
                pm["answer"]["mode"] = mode
            key = f"{model}/{mode or '-'}/{name}"
            out["runs"][key] = run_set(name, pm, gate, tmp)
            r = out["runs"][key]
            rows.append([model, mode or "-", name, r["kept"], r["kept_right"], f"{r['factual_accuracy']:.3f}",
                         r["grounded_wrong_said"], r["answerable_refused"],
                         f"{r['latency']['first_token_ms']['p50']:.0f} / {r['latency']['first_token_ms']['p95']:.0f}",
                         f"{r['latency']['total_ms']['p50']:.0f} / {r['latency']['total_ms']['p95']:.0f}"])
            print(key, r["kept"], r["kept_right"], r["factual_accuracy"], r["wall_s"], flush=True)
    shutil.rmtree(tmp)
    out["runtime_s"] = round(time.perf_counter() - t0, 1)
    write_json(VOICE_METRICS / "llm_models.json", out)
    write_text(VOICE_METRICS / "llm_models.md",
               f"Local models x answer mode through the chain (select.design {p['select']['design']}, select.judge "
               f"{p['select']['judge']}, shipped gate, "
               f"{lm['threads']} thread(s), prompt cache {lm['cache_ram_mib']} MiB, a cold server per run, turn "
               f"no turn deadline; vet: tables off). Runtime {out['runtime_s']:.0f} s.\n\n"
               + markdown_table(["model", "mode", "set", "LLM answers kept", "kept and right", "factual accuracy",
                                 "grounded wrong said", "answerable refused", "first token p50 / p95 ms",
                                 "total p50 / p95 ms"], rows))
    print(open(VOICE_METRICS / "llm_models.md").read())


if __name__ == "__main__":
    main(run)
