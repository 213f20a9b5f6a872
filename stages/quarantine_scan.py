"""Stage quarantine_scan: the quarantine's false positives on clean text -> metrics/quarantine/false_positives.json.

Every paragraph of the clinic KB (``voice.kb``), the vet KB (``abstain.transfer_kb``), HeySQuAD dev-common's
paragraphs (``heysquad.dir``, typed file) and KorQuAD 1.0 dev's (``ko.squad_path``, every context, duplicates
kept) is judged by `rag.voice.quarantine.instruction_like` through the KB reader's splitter (`rag.retrieval.chunk.blocks`).
None of them holds an instruction to an assistant, so every flag is a false positive. Separate from stage chunk
so that the voice track never needs the public data (fetch_data). Only ids, paragraph numbers and cue names
are written (KorQuAD's licence: no derived text in the repository).
"""
from __future__ import annotations

import time
from pathlib import Path

from common import ROOT, main, params
from rag.retrieval.chunk import blocks, kb_blocks
from rag.bench.heysquad import SOURCES
from rag.io import write_json
from rag.bench.squad import load_squad


def _summary(source: str, docs: list[tuple[str, list]]) -> dict:
    flagged = [{"doc": d, "paragraph": b.n, "line": b.line, "cue": b.cue.split(":", 1)[0]}
               for d, bs in docs for b in bs if b.cue]
    return {"source": source, "documents": len(docs), "paragraphs": sum(b.n is not None for _, bs in docs for b in bs),
            "flagged": len(flagged), "rows": flagged}


def run() -> None:
    t0 = time.perf_counter()
    p = params()
    out = {}
    for name, kb in (("clinic", p["voice"]["kb"]), ("vet", p["abstain"]["transfer_kb"])):
        out[name] = _summary(kb, [(f.name, bs) for f, bs in kb_blocks(ROOT / kb)])
    public = (("heysquad", Path(p["heysquad"]["dir"]) / SOURCES["typed"]), ("korquad", Path(p["ko"]["squad_path"])))
    for name, path in public:
        ds = load_squad(ROOT / path, dedupe_passages=False)
        out[name] = _summary(path.as_posix(), [(x["_id"], blocks(x["text"])) for x in ds.passages])
    write_json(ROOT / "metrics" / "quarantine" / "false_positives.json",
               {"kbs": out, "total_paragraphs": sum(v["paragraphs"] for v in out.values()),
                "total_flagged": sum(v["flagged"] for v in out.values())})
    print("quarantine_scan: " + ", ".join(f"{k} {v['flagged']}/{v['paragraphs']}" for k, v in out.items())
          + f" flagged, {time.perf_counter() - t0:.1f} s")


main(run)
