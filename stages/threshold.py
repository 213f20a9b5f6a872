"""Stage threshold: fit the gate (abstain.signal's model and tau) on the clinic fixture's signals ->
models/gate.json (the shipped gate that `rag run` / `rag ask` apply to any KB) and metrics/voice/threshold.json."""
from common import GATE_PATH, VOICE_DATA, VOICE_METRICS, main, params
from rag.io import read_jsonl, write_json
from rag.voice.pipeline import step_threshold


def run():
    p = params()
    per_query = read_jsonl(VOICE_DATA / "per_query.jsonl", required=("id", "answerable", "signals"))
    fitted_on = {"kb": p["voice"]["kb"], "queries": p["voice"]["queries"]}
    gate, report = step_threshold(per_query, p, fitted_on)
    write_json(GATE_PATH, gate.to_dict())
    write_json(VOICE_METRICS / "threshold.json", report)


main(run)
