"""Stage bench_cli: what a new user waits for, as they run it (`python -m rag` in a subprocess, wall-clock s) ->
metrics/voice/cli_bench.json: `ask` on the clinic KB with an empty KB cache (first ask: embeds the KB) and with it
cached, and `run` on the vet KB's 30 clean questions (KB cached). The LLM is down (`--llm-url` of a closed port):
the numbers are ours (imports, model load, index, gate, pick), not the model's. Medians of ``bench.cli_repeats``
runs, every sample kept; machine-dependent: quote ratios."""
import os
import statistics
import subprocess
import sys
import tempfile
import time

from common import ROOT, VOICE_METRICS, main, params
from rag.io import write_json

DOWN = "http://127.0.0.1:9"


def seconds(args: list[str], cache: str) -> float:
    """Wall-clock seconds of ``python -m rag ARGS`` with the KB cache in ``cache``; raises on a non-zero exit."""
    env = {**os.environ, "RAG_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "rag", *args, "--llm-url", DOWN], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def run():
    p = params()
    n = int(p["bench"]["cli_repeats"])
    ask = ["ask", "what time do you open on saturday", "--kb", str(ROOT / p["voice"]["kb"])]
    vet = ["run", str(ROOT / p["abstain"]["transfer_kb"]), str(ROOT / p["abstain"]["transfer_queries"]["clean"])]
    samples = {"ask_first_s": [], "ask_cached_s": [], "run_30_cached_s": []}
    for _ in range(n):
        with tempfile.TemporaryDirectory() as cache:
            samples["ask_first_s"].append(seconds(ask, cache))   # empty cache: chunk + embed the KB
            samples["ask_cached_s"].append(seconds(ask, cache))
            seconds(["ask", "x", "--kb", vet[1]], cache)         # warm the vet KB's cache entry
            samples["run_30_cached_s"].append(seconds(vet, cache))
    out = {k: {"median": round(statistics.median(v), 3), "samples": [round(x, 3) for x in v]} for k, v in samples.items()}
    write_json(VOICE_METRICS / "cli_bench.json", {"repeats": n, "llm": "down", **out})
    print({k: v["median"] for k, v in out.items()})


main(run)
