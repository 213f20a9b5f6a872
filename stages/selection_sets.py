"""The question sets of stages selection and selection_llm (one definition for both), with their answer rows."""
from common import GATE_PATH, ROOT, tables_off


def selection_answers(p: dict, url: str | None, skip: tuple[str, ...] = ()) -> tuple[dict, dict, dict]:
    """The sets of stage selection and their answer rows (`rag.voice.pipeline.step_answer`, LLM at ``url``; None:
    down), the shipped gate (models/gate.json) applied unchanged. Returns ``(kbs, sets, answers)``: ``kbs`` is
    ``{"clinic" | "vet": (PassageIndex, {doc: text})}`` (``voice.kb``, ``abstain.transfer_kb``; quarantined
    paragraphs left out), ``sets`` ``{name: (kb, params, queries)}``, ``answers`` ``{name: rows}`` for every set
    not in ``skip``.

    Sets: the clinic fixture (its tables on), the held-out vet KB clean and noisy (tables off, `tables_off`) and
    the near-miss sets (``select.near_miss``, typed and recogniser forms: every question must be refused)."""
    from rag import config
    from rag.eval.evaluate import embed_texts
    from rag.retrieval.chunk import load_kb
    from rag.retrieval.search import PassageIndex
    from rag.voice.gate import Gate
    from rag.voice.pipeline import gate_function, step_answer
    from rag.voice.quarantine import allowed
    from rag.voice.queries import load_queries, rewrite_queries

    a, s = p["abstain"], p["select"]
    gate = Gate.load(GATE_PATH)
    kbs = {n: (PassageIndex.from_folder(ROOT / kb, config.hybrid_config(p), allowed(p)), load_kb(ROOT / kb, allowed(p)))
           for n, kb in (("clinic", p["voice"]["kb"]), ("vet", a["transfer_kb"]))}

    def typed(queries):  # the near-miss questions as typed (the text the recogniser heard)
        return [{**q, "asr": q["spoken"]} for q in queries]

    sets = {
        "clinic": ("clinic", p, load_queries(ROOT / p["voice"]["queries"])),
        "vet_clean": ("vet", tables_off(p), load_queries(ROOT / a["transfer_queries"]["clean"])),
        "vet_noisy": ("vet", tables_off(p), load_queries(ROOT / a["transfer_queries"]["noisy"])),
        "near_miss_clinic_typed": ("clinic", p, typed(load_queries(ROOT / s["near_miss"]["clinic"]))),
        "near_miss_clinic_asr": ("clinic", p, load_queries(ROOT / s["near_miss"]["clinic"])),
        "near_miss_vet_typed": ("vet", tables_off(p), typed(load_queries(ROOT / s["near_miss"]["vet_clean"]))),
        "near_miss_vet_clean": ("vet", tables_off(p), load_queries(ROOT / s["near_miss"]["vet_clean"])),
        "near_miss_vet_noisy": ("vet", tables_off(p), load_queries(ROOT / s["near_miss"]["vet_noisy"])),
    }
    answers = {}
    for name, (kb, q_p, qs) in sets.items():
        if name in skip:
            continue
        index, docs = kbs[kb]
        ts = rewrite_queries(qs, config.rewrite_rules(q_p, index.passages))
        vs = embed_texts(ts)
        score = gate_function(gate, index, p)
        answers[name] = step_answer(index, qs, docs, q_p, gate.tau, url, {q: score(ts[q], vs[q]) for q in ts})
    return kbs, sets, answers
