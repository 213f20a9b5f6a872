"""Stage selection_llm: the LLM's replies (``llm``, ``answer``) on every set of stage selection except the clinic
(the answer stage's answers.jsonl has those): the held-out vet KB clean and noisy and the near-miss sets, the
shipped gate applied unchanged, no turn deadline (`common.without_deadline`). Writes data/voice/selection_llm.jsonl (answer rows of
`rag.voice.answer.answer_row`, each tagged with its ``set``); stage selection judges them per design. A separate
stage so that `dvc exp run -S select.judge=...` re-judges the same replies without asking the model again.
"""
import time

from common import VOICE_DATA, main, params, without_deadline
from selection_sets import selection_answers
from rag.io import write_jsonl
from rag.voice.pipeline import llm_url


def run():
    t0 = time.perf_counter()
    p = without_deadline(params())
    with llm_url(p, print) as url:
        answers = selection_answers(p, url, skip=("clinic",))[2]
    rows = [{"set": name, **r} for name, rs in answers.items() for r in rs]
    write_jsonl(VOICE_DATA / "selection_llm.jsonl", rows)
    asked = [r for r in rows if not r["gated"]]
    print(f"selection_llm: {len(rows)} questions, {len(asked)} asked, "
          f"{sum(r['error'] is None for r in asked)} replies, {time.perf_counter() - t0:.0f} s")


main(run)
