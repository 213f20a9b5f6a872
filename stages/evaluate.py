"""Stage evaluate: retrieval of raw vs rewritten transcripts -> per_query.jsonl, retrieval.json."""
from common import ROOT, VOICE_DATA, VOICE_METRICS, main, params, voice_index
from rag.io import write_json, write_jsonl
from rag.voice.pipeline import step_evaluate
from rag.voice.queries import load_queries


def run():
    p = params()
    rows, metrics = step_evaluate(voice_index(p), load_queries(ROOT / p["voice"]["queries"]), p)
    write_jsonl(VOICE_DATA / "per_query.jsonl", rows)
    write_json(VOICE_METRICS / "retrieval.json", metrics)


main(run)
