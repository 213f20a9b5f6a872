"""The question sets of stages selection and selection_llm (one definition for both), with their answer rows."""
import time

from common import GATE_PATH, ROOT, tables_off

# The recogniser forms of the two choose KBs (clinic, Harbor Dental), where a learned design's min_score is chosen
# from the grid; the vet sets only report (rule written 2026-12-05 before the dental KB's first run, README)
CHOOSE_SETS = ("clinic", "near_miss_clinic_asr", "dental", "near_miss_dental_asr")
REPORT_SETS = ("vet_clean", "vet_noisy", "near_miss_vet_typed", "near_miss_vet_clean", "near_miss_vet_noisy")


def choose_utility(by_set: dict, runs: dict) -> int:
    """Right answers said - grounded-but-wrong sentences said - near misses said, summed over CHOOSE_SETS;
    ``by_set``: ``{set: what is said}`` (stage selection's rows), ``runs``: ``{set: (kb, params, queries)}``."""
    u = 0
    for name in CHOOSE_SETS:
        r, qs = by_set[name], runs[name][2]
        u += (-r["said"] if name.startswith("near_miss") else
              round(r["factual_accuracy"] * sum(q["answerable"] for q in qs)) - r["grounded_wrong_said"])
    return u


def min_score_on_choose_sets(by_min_score: dict, runs: dict) -> tuple[str, dict]:
    """The min_score (a key of ``by_min_score``, ``{min_score: {set: what is said}}``) with the highest
    `choose_utility`, ties to the lower value; returns ``(that key, {key: utility})``."""
    u = {t: choose_utility(r, runs) for t, r in by_min_score.items()}
    return max(u, key=lambda t: (u[t], -float(t))), u


def kb_folders(p: dict) -> dict:
    """``{kb name of `set_sources`: its folder}``: the clinic fixture (``voice.kb``), Harbor Dental
    (``select.dental.kb``), Riverside Hair Studio (``select.salon.kb``) and the held-out vet KB (``abstain.transfer_kb``)."""
    return {"clinic": p["voice"]["kb"], "dental": p["select"]["dental"]["kb"], "salon": p["select"]["salon"]["kb"],
            "vet": p["abstain"]["transfer_kb"]}


def set_sources(p: dict) -> dict:
    """``{set name: (kb name, its params, questions file, typed)}`` of every set of stage selection: the clinic
    fixture (its tables on), the second and third choose KBs (``select.dental``: Harbor Dental, ``select.salon``:
    Riverside Hair Studio; tables off, `tables_off`), the held-out vet KB clean and noisy (tables off) and the
    near-miss sets (``select.near_miss``; ``typed``: the words as said, ``spoken``, stand for what the recogniser
    heard)."""
    a, s = p["abstain"], p["select"]
    return {
        "clinic": ("clinic", p, ROOT / p["voice"]["queries"], False),
        "dental": ("dental", tables_off(p), ROOT / s["dental"]["queries"], False),
        "salon": ("salon", tables_off(p), ROOT / s["salon"]["queries"], False),
        "vet_clean": ("vet", tables_off(p), ROOT / a["transfer_queries"]["clean"], False),
        "vet_noisy": ("vet", tables_off(p), ROOT / a["transfer_queries"]["noisy"], False),
        "near_miss_clinic_typed": ("clinic", p, ROOT / s["near_miss"]["clinic"], True),
        "near_miss_clinic_asr": ("clinic", p, ROOT / s["near_miss"]["clinic"], False),
        "near_miss_dental_typed": ("dental", tables_off(p), ROOT / s["near_miss"]["dental"], True),
        "near_miss_dental_asr": ("dental", tables_off(p), ROOT / s["near_miss"]["dental"], False),
        "near_miss_salon_typed": ("salon", tables_off(p), ROOT / s["near_miss"]["salon"], True),
        "near_miss_salon_asr": ("salon", tables_off(p), ROOT / s["near_miss"]["salon"], False),
        "near_miss_vet_typed": ("vet", tables_off(p), ROOT / s["near_miss"]["vet_clean"], True),
        "near_miss_vet_clean": ("vet", tables_off(p), ROOT / s["near_miss"]["vet_clean"], False),
        "near_miss_vet_noisy": ("vet", tables_off(p), ROOT / s["near_miss"]["vet_noisy"], False),
    }


def selection_answers(p: dict, url: str | None, skip: tuple[str, ...] = ()) -> tuple[dict, dict, dict]:
    """The sets of stage selection and their answer rows (`rag.voice.pipeline.step_answer`, LLM at ``url``; None:
    down), the shipped gate (models/gate.json) applied unchanged. Returns ``(kbs, sets, answers)``: ``kbs`` is
    ``{"clinic" | "dental" | "salon" | "vet": (PassageIndex, {doc: text})}`` (``voice.kb``, ``select.dental.kb``,
    ``select.salon.kb``, ``abstain.transfer_kb``; quarantined
    paragraphs left out), ``sets`` ``{name: (kb, params, queries)}``, ``answers`` ``{name: rows}`` for every set
    not in ``skip``.

    Sets: `set_sources` (the near-miss sets, typed and recogniser forms: every question must be refused)."""
    from rag import config
    from rag.eval.evaluate import embed_texts
    from rag.retrieval.chunk import load_kb
    from rag.retrieval.search import PassageIndex
    from rag.voice.gate import Gate
    from rag.voice.pipeline import gate_function, step_answer
    from rag.voice.quarantine import allowed
    from rag.voice.queries import load_queries, rewrite_queries

    gate = Gate.load(GATE_PATH)
    kbs = {n: (PassageIndex.from_folder(ROOT / kb, config.hybrid_config(p), allowed(p)), load_kb(ROOT / kb, allowed(p)))
           for n, kb in kb_folders(p).items()}
    sets = {name: (kb, q_p, [{**q, "asr": q["spoken"]} if typed else q for q in load_queries(path)])
            for name, (kb, q_p, path, typed) in set_sources(p).items()}
    answers = {}
    todo = [name for name in sets if name not in skip]
    for i, name in enumerate(todo, 1):
        kb, q_p, qs = sets[name]
        t0 = time.perf_counter()
        index, docs = kbs[kb]
        ts = rewrite_queries(qs, config.rewrite_rules(q_p, index.passages))
        vs = embed_texts(ts)
        score = gate_function(gate, index, p)
        answers[name] = step_answer(index, qs, docs, q_p, gate.tau, url, {q: score(ts[q], vs[q]) for q in ts})
        print(f"answers: set {i}/{len(todo)} {name}: {len(qs)} questions, {time.perf_counter() - t0:.0f} s"
              + ("" if url else " (LLM off)"), flush=True)   # a set with the LLM on takes minutes
    return kbs, sets, answers
