"""Stage final: verify each answer (and check it answers: the learned `select.design`, or `select.judge` under
rules), fall back to an extractive sentence -> final.jsonl, final.json."""
from common import GATE_PATH, ROOT, VOICE_DATA, VOICE_METRICS, answer_judge, answer_scorer, main, params
from rag.retrieval.chunk import load_kb
from rag.voice.quarantine import allowed
from rag.voice.gate import Gate
from rag.io import read_jsonl, write_json, write_jsonl
from rag.voice.pipeline import step_final
from rag.voice.queries import load_queries
from rag.retrieval.sentences import SentenceIndex


def run():
    p = params()
    tau = Gate.load(GATE_PATH).tau
    answers = read_jsonl(VOICE_DATA / "answers.jsonl", required=("id", "query", "gated", "error"))
    sentences = SentenceIndex.load(VOICE_DATA / "sentences.jsonl", VOICE_DATA / "sentences.npy")
    rows, metrics = step_final(answers, load_queries(ROOT / p["voice"]["queries"]),
                               load_kb(ROOT / p["voice"]["kb"], allowed(p)), p, tau, sentences,
                               answer_scorer(p), answer_judge(p))
    write_jsonl(VOICE_DATA / "final.jsonl", rows)
    write_json(VOICE_METRICS / "final.json", metrics)


main(run)
