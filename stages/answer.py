"""Stage answer: gate (models/gate.json), ask the LLM within the schema -> answers.jsonl, latency.json.

No turn deadline (`common.without_deadline`): each call runs to ``llm.timeout_s``; latency.json counts the replies
slower than ``answer.deadline_s`` less ``answer.reserve_s`` (what a caller would have heard as the fallback).
"""
from common import ROOT, VOICE_DATA, VOICE_METRICS, gate_scores, main, params, voice_index, without_deadline
from rag.retrieval.chunk import load_kb
from rag.voice.quarantine import allowed
from rag.io import read_jsonl, write_json, write_jsonl
from rag.voice.pipeline import latency_metrics, llm_url, step_answer
from rag.voice.queries import load_queries


def run():
    served = params()
    p = without_deadline(served)
    queries = load_queries(ROOT / p["voice"]["queries"])
    gate, scores = gate_scores(read_jsonl(VOICE_DATA / "per_query.jsonl", required=("id", "signals")))
    with llm_url(p) as url:
        answers = step_answer(voice_index(p), queries, load_kb(ROOT / p["voice"]["kb"], allowed(p)), p, gate.tau, url, scores)
    write_jsonl(VOICE_DATA / "answers.jsonl", answers)
    write_json(VOICE_METRICS / "latency.json", latency_metrics(answers, served["answer"]))


main(run)
