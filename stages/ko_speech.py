"""Stage ko_speech (frozen; issue 15 part 3): Korean questions spoken, heard by whisper-base, and searched.

``ko_speech.sample`` test-split KorQuAD questions (drawn with ``ko_speech.seed``) are spoken by espeak-ng's Korean
voice (`rag.voice.speech.espeak`; no Korean voice ships for piper or on PyPI, see ../shared/SCOUTED.md), heard by
whisper-base (language ko, encoder window ``speech.window_s``; `rag.voice.asr.transcribe`), and searched, typed and
as heard, with the Korean track's BM25 over kiwi content morphemes (k1 ``ko_gen.bm25_k1``, chosen on train) over
every passage. Writes metrics/ko/speech.json: character error rate (`rag.eval.wer.cer`), recall@1 / hit@5 /
MRR@10 typed vs heard, decode times, and per question its id, CER and the rank of its gold passage each way
(numbers and ids only: KorQuAD's text stays out of git), and metrics/ko/speech.md.
Needs the `voice` extra and Debian's espeak-ng. Run by hand (~2 min): see README "Speech in and out".
"""
from __future__ import annotations

import json
import random
import tempfile
import time
from pathlib import Path

from common import main, params
from rag.bench.latency import summary
from rag.bench.squad import passage_text
from rag.eval.metrics import evaluate_run, to_run
from rag.eval.wer import cer
from rag.io import read_jsonl, write_json, write_text
from rag.ko import tokenize as korean
from rag.retrieval.indexes import BM25Index
from rag.voice.asr import transcribe
from rag.voice.speech import espeak

DEPTH, KS = 10, (1, 5, 10)


def rank(ranking: list[tuple[int, float]], pids: list[str], gold: dict) -> int | None:
    """1-based rank of the first relevant passage within `DEPTH`, else None."""
    return next((i for i, (j, _) in enumerate(ranking, 1) if gold.get(pids[j], 0) > 0), None)


def run() -> None:
    p = params()
    ko, s, spoken = p["ko"], p["speech"], p["ko_speech"]
    t_start = time.perf_counter()
    data, out = Path(ko["data_dir"]), Path(ko["metrics_dir"])
    passages = read_jsonl(data / "passages.jsonl", required=["_id", "title", "text"])
    queries = read_jsonl(data / "queries.jsonl", required=["_id", "text", "split"])
    qrels = json.loads((data / "qrels.json").read_text(encoding="utf-8"))
    test = [q for q in queries if q["split"] == "test"]
    sample = random.Random(spoken["seed"]).sample(test, min(spoken["sample"], len(test)))
    pids = [x["_id"] for x in passages]
    index = BM25Index([passage_text(x, ko["index_title"]) for x in passages], korean.kiwi_tokens,
                      k1=p["ko_gen"]["bm25_k1"], b=ko["bm25_b"])
    rows, heard, rankings = [], {}, {"typed": {}, "heard": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for n, q in enumerate(sample, 1):
            wav = espeak(q["text"], Path(tmp) / "q.wav", spoken["voice"], spoken["rate_wpm"])
            tr = transcribe(wav, "whisper-base", s["threads"], s["beam_size"], s["chunk_ms"], "ko",
                            window_s=s["window_s"])
            heard[q["_id"]] = tr.text
            rankings["typed"][q["_id"]] = index.top_k(q["text"], DEPTH)
            rankings["heard"][q["_id"]] = index.top_k(tr.text, DEPTH) if tr.text else []
            typed_rank = rank(rankings["typed"][q["_id"]], pids, qrels[q["_id"]])
            heard_rank = rank(rankings["heard"][q["_id"]], pids, qrels[q["_id"]])
            rows.append({"id": q["_id"], "cer": cer([(q["text"], tr.text)])["cer"], "audio_s": tr.audio_s,
                         "decode_ms": tr.decode_ms, "rank_typed": typed_rank, "rank_heard": heard_rank})
            print(f"[{n}/{len(sample)}] {q['_id']}: CER {rows[-1]['cer']:.2f}, gold at {typed_rank} typed, "
                  f"{heard_rank} heard", flush=True)
    gold = {q["_id"]: qrels[q["_id"]] for q in sample}
    metrics = {}
    for form, by_id in rankings.items():
        m = evaluate_run(gold, to_run(by_id, pids), KS)
        metrics[form] = {k: round(m[k], 4) for k in ("recall@1", "hit@5", "mrr@10")}
    result = {"questions": len(sample), "split": "test", "tts": f"espeak-ng {spoken['voice']} {spoken['rate_wpm']} wpm",
              "asr": "whisper-base (ko)", "retriever": f"bm25_kiwi k1={p['ko_gen']['bm25_k1']}",
              **cer([(q["text"], heard[q["_id"]]) for q in sample]), "retrieval": metrics,
              "decode_ms": summary([r["decode_ms"] for r in rows]),
              "runtime_s": round(time.perf_counter() - t_start, 1), "rows": rows}
    write_json(out / "speech.json", result)
    lines = [f"# Korean questions spoken (espeak-ng) and heard (whisper-base), {len(sample)} test questions", "",
             f"CER {result['cer']:.3f} ({result['errors']} errors / {result['chars']} characters); decode p50 "
             f"{result['decode_ms']['p50']:.0f} ms", "", "| form | recall@1 | hit@5 | MRR@10 |", "|---|---|---|---|"]
    lines += [f"| {form} | {m['recall@1']:.3f} | {m['hit@5']:.3f} | {m['mrr@10']:.3f} |" for form, m in metrics.items()]
    write_text(out / "speech.md", "\n".join(lines) + "\n")
    print({k: result[k] for k in ("cer", "retrieval", "runtime_s")})


main(run)
