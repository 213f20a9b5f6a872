"""Stage heysquad_prepare: the three HeySQuAD dev-common files -> passages.jsonl, queries.jsonl.

Reads params ``heysquad.dir`` (read in place), ``sample_passages`` (0 = all 311), ``seed``, ``data_dir``.
Writes ``{data_dir}/passages.jsonl`` (``_id, title, text, article``) and ``{data_dir}/queries.jsonl``
(``id, relevant, answerable, typed, human, machine, answers``); see `rag.bench.heysquad`.
"""
import time

from common import ROOT, main, params
from rag.bench.heysquad import load_heysquad, sample
from rag.io import write_jsonl


def run():
    h = params()["heysquad"]
    t0 = time.perf_counter()
    passages, queries = sample(*load_heysquad(ROOT / h["dir"]), int(h["sample_passages"]), int(h["seed"]))
    write_jsonl(ROOT / h["data_dir"] / "passages.jsonl", passages)
    write_jsonl(ROOT / h["data_dir"] / "queries.jsonl", queries)
    print(f"heysquad_prepare: {len(passages)} passages, {len(queries)} questions, {time.perf_counter() - t0:.1f} s")


main(run)
