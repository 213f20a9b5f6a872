"""Stage threshold: fit tau on the per-query top-1 cosine -> metrics/voice/threshold.json."""
from common import VOICE_DATA, VOICE_METRICS, main, params
from rag.io import read_jsonl, write_json
from rag.pipeline import step_threshold


def run():
    per_query = read_jsonl(VOICE_DATA / "per_query.jsonl", required=("id", "answerable", "score"))
    write_json(VOICE_METRICS / "threshold.json", step_threshold(per_query, params()))


main(run)
