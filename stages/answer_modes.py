"""Stage answer_modes: answer.mode free vs choose in one run -> metrics/voice/answer_modes.json. No turn deadline
(`common.without_deadline`); each mode's latency counts the replies slower than it."""
import copy

from common import (ROOT, VOICE_DATA, VOICE_METRICS, answer_judge, answer_scorer, gate_scores, main, params, voice_index,
                    without_deadline)
from rag.retrieval.chunk import load_kb
from rag.voice.quarantine import allowed
from rag.io import read_jsonl, write_json
from rag.voice.pipeline import latency_metrics, llm_url, step_answer, step_final
from rag.voice.queries import load_queries


def run():
    served = params()
    p = without_deadline(served)
    queries = load_queries(ROOT / p["voice"]["queries"])
    kb, index = load_kb(ROOT / p["voice"]["kb"], allowed(p)), voice_index(p)
    gate, scores = gate_scores(read_jsonl(VOICE_DATA / "per_query.jsonl", required=("id", "signals")))
    tau = gate.tau
    scorer, judge = answer_scorer(p), answer_judge(p)  # as shipped
    out = {}
    with llm_url(p) as url:
        for mode in ("free", "choose"):
            pm = copy.deepcopy(p)
            pm["answer"]["mode"] = mode
            answers = step_answer(index, queries, kb, pm, tau, url, scores)
            _, final = step_final(answers, queries, kb, pm, tau, scorer=scorer, judge=judge)
            called = [a for a in answers if not a["gated"]]
            out[mode] = {"llm_called": len(called), "llm_valid_json": sum(a["error"] is None for a in called),
                         "llm_kept": final["n_llm"],
                         "llm_kept_share": round(final["n_llm"] / len(called), 6) if called else 0.0,
                         "factual_accuracy": final["factual_accuracy"],
                         "grounded_wrong_said": final["grounded_wrong_said"],
                         "unsupported_said": final["unsupported_said"],
                         "latency": latency_metrics(answers, served["answer"])}
    write_json(VOICE_METRICS / "answer_modes.json", out)


main(run)
