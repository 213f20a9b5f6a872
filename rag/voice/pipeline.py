"""The voice chain as steps: evaluate -> threshold -> answer -> final.

The DVC stages call one step each (with files in between); `run_chain` calls them in memory for the CLI, on
any KB folder and queries file, with the shipped gate (models/gate.json) or one fitted on the queries' labels. ``p`` is a params mapping shaped like params.yaml.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

import numpy as np

from rag import config

from rag.voice import quarantine
from rag.voice.answer import answer_row, decide, pick_for
from rag.eval.evaluate import doc_runs, embed_texts, retrieval_metrics, top1_cosine
from rag.voice.gate import Gate, fit_gate
from rag.io import InputError
from rag.voice.queries import check_against_kb, is_labelled, load_queries, raw_queries, rewrite_queries
from rag.eval.scoring import final_metrics, status_counts
from rag.retrieval.search import PassageIndex
from rag.voice.selection import ASKS, HOLDS, AnswerScorer, terms
from rag.retrieval.sentences import SentenceIndex
from rag.voice.rewrite import normalise
from rag.voice.verify import split_sentences

if TYPE_CHECKING:
    from rag.voice.followup import Resolution, Resolver
    from rag.retrieval.kb_cache import KnowledgeBase
    from rag.memory import Memory, Turn
    from rag.memory.recall import EvidencePolicy


def question_signals(index: PassageIndex, texts: Mapping[str, str], vectors: Mapping[str, np.ndarray],
                     p: Mapping) -> dict[str, dict[str, float]]:
    """``{query_id: {signal: value}}``: every abstention signal of `rag.voice.abstain.features` (rounded to 6
    decimals), the gate's input; ``vectors``: ``{query_id: (384,) unit vector}`` of ``texts``."""
    from rag.voice import abstain

    feats = abstain.features(index, texts, vectors, p["retrieval"]["stopwords"] or ())
    return {q: {k: round(v, 6) for k, v in f.items()} for q, f in feats.items()}


def check_gate(gate: Gate, p: Mapping) -> None:
    """Raise `rag.voice.gate.GateMismatch` unless ``gate`` was fitted for ``p``'s signal, this embedder and ``p``'s
    retrieval settings."""
    from rag.retrieval.embed import embedder_id

    gate.check(p["abstain"]["signal"], embedder_id(), config.gate_retrieval(p))


def gate_function(gate: Gate, index: PassageIndex, p: Mapping) -> Callable[[str, np.ndarray], float]:
    """The gate as ``(query, (384,) unit vector) -> score`` on ``index`` (one question at a time, as a turn
    needs it)."""
    def score(query: str, vector: np.ndarray) -> float:
        return gate.scores(question_signals(index, {"q": query}, {"q": vector}, p))["q"]
    return score


HEADLINE = ("recall@1", "recall@3", "mrr@10")  # the retrieval metrics step_evaluate reports


def step_evaluate(index: PassageIndex, queries: Sequence[dict], p: Mapping) -> tuple[list[dict], dict]:
    """Search with the raw and the rewritten transcript in ``retrieval.mode``.

    Raises InputError (`rag.voice.queries.check_against_kb`) for gold names not in the KB or no
    answerable query. Returns (per-query rows ``{id, answerable, query, raw_top, top, raw_score, top1, score}``,
    metrics ``{"mode": ..., "raw": {recall_at_1, recall_at_3, mrr_at_10}, "rewritten": {...}}``); ``raw_score`` / ``top1`` are the raw and
    rewritten top-1 cosines, ``signals`` the rewritten query's abstention signals (`question_signals`).
    """
    check_against_kb(queries, {x.doc for x in index.passages})
    mode = p["retrieval"]["mode"]
    rules = config.rewrite_rules(p, index.passages)
    forms = {"raw": raw_queries(queries), "rewritten": rewrite_queries(queries, rules)}
    rows = {q["id"]: {"id": q["id"], "answerable": q["answerable"], "query": forms["rewritten"][q["id"]]}
            for q in queries}
    metrics = {"mode": mode}
    for form, texts in forms.items():
        vectors = embed_texts(texts)
        runs = doc_runs(index, texts, mode, vectors)
        # retrieval.json is a headline file (dvc exp show): recall_at_1, recall_at_3, mrr_at_10; the full
        # matrix is the compare stage's (compare.json keeps "recall@1").
        metrics[form] = {k.replace("@", "_at_"): v for k, v in retrieval_metrics(queries, runs, (1, 3, 10)).items()
                         if k in HEADLINE}
        for qid, cos in top1_cosine(index, vectors).items():
            rows[qid]["raw_top" if form == "raw" else "top"] = [d for d, _ in runs[qid][:3]]
            rows[qid]["raw_score" if form == "raw" else "top1"] = round(cos, 6)
        if form == "rewritten":
            for qid, sig in question_signals(index, texts, vectors, p).items():
                rows[qid]["signals"] = sig
    return list(rows.values()), metrics


def step_threshold(per_query: Sequence[dict], p: Mapping, fitted_on: Mapping) -> tuple[Gate, dict]:
    """Fit the gate (``abstain.signal``; its model and tau) on the rewritten queries' ``signals`` and labels
    (`rag.voice.gate.fit_gate`, ``threshold.policy`` / ``epsilon``). ``fitted_on``: what to record as the data (KB,
    queries file). Returns ``(gate, report)``; raises ThresholdError as `rag.voice.gate.fit_gate` does."""
    from rag.retrieval.embed import embedder_id

    t = p["threshold"]
    return fit_gate({r["id"]: r["signals"] for r in per_query}, {r["id"]: r["answerable"] for r in per_query},
                    p["abstain"]["signal"], t["policy"], float(t["epsilon"]), int(p["abstain"]["seed"]),
                    embedder_id(), config.gate_retrieval(p), fitted_on)


@contextlib.contextmanager
def llm_url(p: Mapping, warn: Callable[[str], None] | None = None):
    """Yield the LLM base URL: ``llm.url`` if set (with ``warn``: checked once, `rag.llm.client.reachable`; when
    nothing answers there ``warn`` is told and None is yielded, so no question waits on it), else a local llama.cpp server started here and stopped (by PID) on exit, errors
    included, serving ``llm.local_model`` (`rag.llm.registry`) with ``llm.n_parallel`` slots (1 when the key is
    absent; `rag.llm.server.LocalServer.from_params`) on ``llm.server``'s build. Yields None when the local server fails
    to start, its model is missing or corrupt, or its build cannot run here (and says why through ``warn``, the pip command included), so the answer step falls back
    instead of crashing."""
    if p["llm"]["url"]:
        if warn:
            from rag.llm.client import reachable

            why = reachable(p["llm"]["url"])
            if why:   # then no question waits on it (a server that accepts and never replies cost each its timeout)
                warn(f"the LLM at {config.without_credentials(p['llm']['url'])} does not answer ({why}); every answer "
                     "will be a verified KB sentence or a refusal")
                yield None
                return
        yield p["llm"]["url"]
        return
    from rag.llm.server import LocalServer

    try:
        server = LocalServer.from_params(p["llm"]).start()
    except (RuntimeError, FileNotFoundError) as e:
        if warn:
            warn(f"the packaged LLM server did not start ({e}); every answer will be a verified KB sentence or a "
                 "refusal")
        yield None
        return
    try:
        yield server.url
    finally:
        server.stop()


def step_answer(index: PassageIndex, queries: Sequence[dict], kb: Mapping[str, str], p: Mapping,
                tau: float, url: str | None, scores: Mapping[str, float], progress: bool = False) -> list[dict]:
    """answers.jsonl rows for every query (see `rag.voice.answer.answer_row`); ``scores`` are the gate scores
    (``{query_id: score}``), compared with ``tau``. ``progress``: a tqdm bar on stderr, one step per query."""
    from tqdm import tqdm

    settings = config.answer_settings(p, tau)
    rewritten = rewrite_queries(queries, config.rewrite_rules(p, index.passages))
    vectors = embed_texts(rewritten)
    return [answer_row(qid, rewritten[qid], index, vectors[qid], scores[qid], settings, kb, url)
            for qid in tqdm(rewritten, desc="answering", unit="q", disable=not progress, leave=False, delay=1.0)]


def step_final(answers: Sequence[dict], queries: Sequence[dict], kb: Mapping[str, str], p: Mapping,
               tau: float, sentences: SentenceIndex | None = None,
               scorer: AnswerScorer | None = None, judge: AnswerScorer | None = None) -> tuple[list[dict], dict]:
    """Verify or replace every answer; returns (final.jsonl rows, final metrics; for unlabelled queries only the
    status and reason counts, `rag.eval.scoring.status_counts`). ``sentences``: the KB's
    precomputed `SentenceIndex` (the embed_sentences stage's); None builds it from ``kb`` here, once.
    ``scorer``: the learned answer selection (`rag.voice.answer.decide`); None: the table-driven pick. ``judge``:
    the learned scorer that checks LLM answers when ``scorer`` is None (``select.judge``, `load_judge`)."""
    settings, rules = config.answer_settings(p, tau), config.verify_rules(p)
    sentences = sentences or SentenceIndex.build(kb)
    vectors = embed_texts({a["id"]: a["query"] for a in answers})
    rows = [decide(a, kb, vectors[a["id"]], settings, rules, sentences, scorer, judge=judge) for a in answers]
    return rows, final_metrics(queries, rows, kb) if is_labelled(queries) else status_counts(rows)


def load_judge(p: Mapping) -> AnswerScorer | None:
    """The shipped scorer of ``select.judge`` (`rag.config.answer_scorer`): it checks every LLM answer when
    ``select.design`` is ``rules`` (None for ``rules``: the verifier alone). Raises ValueError for an unknown
    design, InputError for a missing or bad model file."""
    return config.answer_scorer(p, p["select"]["judge"], "select.judge")


def answer_models(p: Mapping, llm: bool = True) -> tuple[AnswerScorer | None, AnswerScorer | None]:
    """``(scorer, judge)`` of a turn: ``select.design``'s learned answer selection (`rag.config.answer_scorer`; None
    for ``rules``) and, with an ``llm`` to judge, ``select.judge``'s (`load_judge`; None without one), each with the
    e5 encoder its features read already loaded (`rag.voice.selection.AnswerScorer.e5`), so that nothing loads after
    a turn's LLM call: loading it takes ~2 s once per process, and before this the first LLM answer a judge checked
    ran that long past ``answer.deadline_s`` (session 54: the load stage's one caller, 4.3 s for a 3 s turn). Both are
    cached per process (`rag.voice.selection.load_scorer`, `rag.retrieval.e5.cosines_of`): a later call is a lookup.
    Raises what `load_judge` raises, and InputError naming the e5 file when it is missing or its sha256 is not the
    one the scorer recorded."""
    scorer, judge = config.answer_scorer(p), load_judge(p) if llm else None
    for s in (scorer, judge):
        if isinstance(s, AnswerScorer):
            try:
                s.e5()
            except (FileNotFoundError, RuntimeError) as e:
                raise InputError(f"the e5 encoder of the {s.design} answer scorer ({p['select']['model_dir']}): "
                                 f"{e}") from None
    return scorer, judge


def latency_metrics(answers: Sequence[dict], answer: Mapping | None = None) -> dict:
    """p50/p95 (ms) of first-token and total LLM latency over the queries that called the model. With ``answer``
    (params' ``answer`` section, ``deadline_s`` > 0), also ``over_deadline``: the replies whose total took longer
    than ``deadline_s`` less ``reserve_s``, which a turn under that deadline would have cut (reason ``llm_timeout``)
    for the fallback; for a stage that ran without the deadline (`stages/common.without_deadline`)."""
    from rag.bench.latency import summary

    out = {key: summary([a[key] for a in answers if a.get(key) is not None]) for key in ("first_token_ms", "total_ms")}
    if answer and answer["deadline_s"]:
        budget_ms = (float(answer["deadline_s"]) - float(answer["reserve_s"])) * 1000.0
        out["over_deadline"] = {"budget_ms": budget_ms,
                                "replies": sum(a.get("total_ms") is not None and a["total_ms"] > budget_ms
                                               for a in answers)}
    return out


def answer_question(question: str, p: Mapping, gate: Gate, url: str | None, kb: "KnowledgeBase",
                    context: str | None = None) -> tuple[dict, dict]:
    """One typed question on ``kb`` the way a turn runs: rewrite (a follow-up against ``context``, the previous
    question, itself rewritten first), then `answer_query`, the turn's deadline counted from the start (the
    rewriting's time is the turn's too). Returns what `answer_query` does."""
    import time

    from rag.voice.rewrite import rewrite

    start = time.monotonic()
    rules = config.rewrite_rules(p, kb.index.passages)
    return answer_query(rewrite(question, rewrite(context, None, rules) if context else None, rules), p, gate, url,
                        kb, start)


def answer_query(text: str, p: Mapping, gate: Gate, url: str | None, kb: "KnowledgeBase",
                 start: float | None = None, said: frozenset[str] = frozenset(),
                 memory: Sequence[str] = (), focus: frozenset[str] = frozenset()) -> tuple[dict, dict]:
    """A rewritten query ``text`` on ``kb``: retrieve, gate (``gate`` applied as shipped), ask the LLM at ``url``
    (None: down), verify, fall back (``select.design``'s scorer). Returns ``(final row of `rag.voice.answer.decide`,
    the answer row of `rag.voice.answer.answer_row`: query, retrieved, retrieved_scores, score, error)``.

    ``answer.deadline_s`` bounds the turn from ``start`` (a `time.monotonic` instant; default now): the answer
    models (`answer_models`) and the fallback pick (`rag.voice.answer.pick_for`) are ready before the LLM is asked,
    and the LLM call is cancelled ``answer.reserve_s`` before the deadline (reason ``llm_timeout``), so that what is
    left (verifying, judging) fits in time. ``said``: sentences never to say again, ``focus``: what a follow-up adds (`rag.voice.answer.decide`). ``memory``:
    earlier turns of the call the LLM sees as ``[memory n]`` (`rag.memory.recall.memory_lines`), never a source."""
    import time

    from rag.voice.answer import turn_deadline

    start = time.monotonic() if start is None else start
    scorer, judge = answer_models(p, url is not None)  # before the LLM is asked: their loading is the turn's time
    settings = config.answer_settings(p, gate.tau)
    deadline = turn_deadline(settings, start)
    vector = embed_texts({"q": text})["q"]
    score = gate_function(gate, kb.index, p)(text, vector)
    rules, ready = config.verify_rules(p), []

    def prepare(r: dict) -> None:  # the fallback, made before the LLM is asked: its time is the turn's, not extra
        ready.append(pick_for(r, kb.docs, vector, settings, rules, kb.sentences, scorer, said, focus))

    row = answer_row("q", text, kb.index, vector, score, settings, kb.docs, url, deadline, memory, prepare)
    return decide(row, kb.docs, vector, settings, rules, kb.sentences, scorer, said, judge, focus,
                  tuple(ready)), row


def follow_up_resolver(kb: "KnowledgeBase", p: Mapping) -> "Resolver":
    """The `rag.voice.followup.Resolver` of ``kb`` (its documents' word statistics, the rewrite rules with its contrast
    pairs, ``memory``'s follow-up cues): build once per KB."""
    from rag.voice.followup import Resolver

    return Resolver(kb.docs, config.rewrite_rules(p, kb.index.passages), config.follow_up_rules(p))


def answer_turn(question: str, session: str, memory: "Memory", p: Mapping, gate: Gate, url: str | None,
                kb: "KnowledgeBase", resolver: "Resolver", caller: str | None = None) -> tuple[dict, dict | None, "Resolution"]:
    """One turn of a call: read the session's last ``memory.max_turns`` turns from ``memory``
    (`rag.memory.Memory`), resolve the question against their queries (`rag.voice.followup.Resolver`; ``resolver`` from
    `follow_up_resolver`), answer the resolved query (`answer_query`) and record the turn (``caller``: the
    caller id, stored only as a keyed hash). What a follow-up adds (`rag.voice.followup.Resolution.focus`) is held
    by the sentence said where a retrieved one holds it ("and checks" gets the sentence naming checks). A follow-up
    is never answered with the sentence its antecedent turn was (the caller heard it already), unless that sentence
    holds the kind of answer the follow-up's own words ask for ("and how long does it take" after "A tune-up costs
    $60 and takes about 90 minutes.": a duration, `rag.voice.selection.ASKS` / ``HOLDS``) or what it adds ("and
    checks" after "We accept cash, credit cards and checks."). A follow-up with a focus whose merged query is refused
    is asked again in its own words alone ("and medicaid" after a garbled topic: "We do not accept Medicaid."; reason
    prefixed ``own_words``; chosen on the clinic and dental dialogues, 2026-12-05: right - wrong 16 -> 17 pooled, the
    held-out vet dialogues -2 -> -4: README). A follow-up with nothing to lean on is not answered: it says
    ``memory.clarify`` (status refused, reason no_antecedent). A refused turn is nothing to lean on: what the gate
    would not answer (a greeting, a garbled or off-KB question) is no topic for the next turn (chosen on the clinic
    dialogues, 2026-12-03: grounded-but-wrong follow-ups 13 -> 11, accuracy unchanged; README).

    With the LLM on (``url``), the earlier turns `recalled_memory` picks (``memory.evidence``) are in its prompt as
    ``[memory n]``: the caller's words, never a source.

    With a ``caller``, what they told us in earlier calls (`end_call`) fills the question's referents first
    ("my insurance" -> "aetna insurance", `rag.memory.preferences.personalise`); an answer (not a refusal) then begins with
    the mention ("You told us you have aetna.") and the final row's ``preferences`` lists ``[field, value]`` used.
    Returns ``(final row, answer row or None, resolution)``. Memory failures never end the turn
    (`rag.memory.Memory` falls back and says so)."""
    import time

    from rag.memory import Turn
    from rag.memory.preferences import mention, personalise

    start = time.monotonic()
    history = memory.history(session, int(p["memory"]["max_turns"]))
    topics = [t for t in history if t.query and t.status != "refused"]
    rules = config.preference_rules(p)
    stored = memory.preferences(caller, float(p["memory"]["preferences"]["days"]) * 86400.0) if caller else {}
    asked, used = personalise(question, stored, rules)
    res = resolver.resolve(asked, [t.query for t in topics])
    if res.kind == "no_antecedent":
        final, row = {"id": "q", "say": p["memory"]["clarify"], "source": "none", "status": "refused",
                      "reason": "no_antecedent"}, None
    else:  # a follow-up asks for something new: not the sentence its antecedent was answered with, unless it holds it
        last = topics[-1].say if res.antecedent is not None else ""
        repeat_ok = any(r.search(question.lower()) and HOLDS[t].search(last) for t, r in ASKS.items())
        said = frozenset(s for s in split_sentences(last) if not res.focus.intersection(terms(s))) \
            if last and not repeat_ok else frozenset()  # a mention and a KB sentence
        final, row = answer_query(res.query, p, gate, url, kb, start, said,
                                  recalled_memory(res.query, topics, config.evidence_policy(p)) if url else (),
                                  res.focus)
        if res.focus and final["status"] == "refused":  # asked again in the caller's words alone
            own = " ".join(normalise(asked, resolver.rewrite))
            if own and own != res.query:
                again, again_row = answer_query(own, p, gate, url, kb, start)
                if again["status"] != "refused":
                    final, row = {**again, "reason": f"own_words; {again['reason']}"}, again_row
    if used and final["status"] != "refused":
        final = {**final, "say": f"{mention(used, rules)} {final['say']}", "preferences": [list(u) for u in used]}
    memory.record(Turn(session=session, n=history[-1].n + 1 if history else 1, heard=question, query=res.query,
                       say=final["say"], status=final["status"], source=final["source"], reason=final["reason"]),
                  caller)
    return final, row, res


def recalled_memory(query: str, turns: Sequence["Turn"], policy: "EvidencePolicy") -> list[str]:
    """The prompt lines (`rag.memory.recall.memory_lines`) of the earlier ``turns`` (oldest first, each with a
    resolved query) that `rag.memory.recall.evidence` recalls for ``query``: their queries embedded now and scored
    against it (MiniLM cosine)."""
    from rag.memory.recall import evidence, memory_lines

    if not turns or not policy.max_items or policy.min_cosine > 1.0:
        return []
    vectors = embed_texts({"q": query, **{str(i): t.query for i, t in enumerate(turns)}})
    picked = evidence(vectors["q"], np.stack([vectors[str(i)] for i in range(len(turns))]), policy)
    return memory_lines([(turns[i].heard, turns[i].say, turns[i].status) for i in picked], policy.max_chars)


def end_call(session: str, caller: str, memory: "Memory", p: Mapping, ask: Callable | None) -> tuple[dict, str]:
    """A call ends: the LLM (``ask``: ``(messages, schema) -> LLMReply``, None when down) fills
    ``memory.preferences.fields`` from what the caller said in ``session`` (`rag.memory.preferences.summarise`), and
    what code keeps is stored for ``caller`` (`rag.memory.Memory.remember`). Returns ``(kept {field: value}, why)``;
    ``why`` says what was dropped or why nothing was stored ("llm down", "no turns", "no store for preferences").
    Never raises."""
    from rag.memory.preferences import summarise

    heard = [t.heard for t in memory.history(session, 1_000_000)]
    if ask is None:
        return {}, "llm down" if heard else "no turns"
    kept, why = summarise(heard, ask, config.preference_rules(p))
    if kept and memory.remember(caller, kept, session) is None:
        return {}, "; ".join(filter(None, [why, "no store for preferences"]))
    return kept, why


def preference_ask(url: str | None, p: Mapping) -> Callable | None:
    """`end_call`'s ``ask`` on the LLM at ``url`` (None -> None): temperature 0, ``memory.preferences`` max_tokens
    and timeout_s."""
    if url is None:
        return None
    from rag.llm.client import ask

    m = p["memory"]["preferences"]
    return lambda messages, schema: ask(url, messages, schema, max_tokens=int(m["max_tokens"]),
                                        timeout_s=float(m["timeout_s"]), model=p["llm"].get("model") or None)


def run_chain(kb_folder: str | Path, queries_path: str | Path, p: Mapping, gate: Gate | None,
              cache_dir: str | Path | None = None, progress: bool = False,
              warn: Callable[[str], None] | None = None) -> dict:
    """The voice chain on any KB folder and queries file (only ``id`` and ``asr`` needed): gate -> answer ->
    final. ``gate``: the shipped gate, applied as is (checked with `check_gate`); None fits one here on the
    queries' labels (in-sample, so its refusal numbers are optimistic). Labelled queries (``answerable``,
    ``relevant``, ``facts``) also get the retrieval and answer metrics. ``cache_dir``: `rag.retrieval.kb_cache.open_kb`'s;
    ``progress``: tqdm bars on stderr; ``warn``: told when the LLM server does not start and, one line each,
    the KB's quarantined instruction-like paragraphs (`rag.retrieval.kb_cache.open_kb`; ``voice.allow_instructions``).

    Returns ``{gate, retrieval (labelled only), final, latency, answers}`` (``gate.artifact``: the gate fitted here,
    `rag.voice.gate.Gate.to_dict`, when ``gate`` was None) where ``answers`` are per query
    ``{id, asr, query, retrieved: [[doc, score]], gate_score, tau, status, reason, say, source, llm_error}``.
    Raises rag.io.InputError for bad inputs, ValueError / KeyError / TypeError for bad params
    (`rag.config.check`, `rag.voice.selection.load_scorer` for ``select``), GateMismatch for a gate fitted for other
    settings and ThresholdError when fitting finds one class only, all before any LLM call.
    """
    from rag.retrieval.kb_cache import open_kb

    config.check(p)
    scorer = config.answer_scorer(p)
    judge = load_judge(p)
    queries = load_queries(queries_path)
    labelled = is_labelled(queries)
    if gate is None and not labelled:
        raise InputError(f"{queries_path}: fitting the gate needs labelled questions (answerable, relevant, facts)")
    if gate is not None:
        check_gate(gate, p)
    kb = open_kb(kb_folder, config.hybrid_config(p), cache_dir, progress, quarantine.allowed(p), warn,
                 config.kb_store(p))
    if labelled:
        check_against_kb(queries, {x.doc for x in kb.index.passages}, str(queries_path))
        per_query, retrieval = step_evaluate(kb.index, queries, p)
        signals = {r["id"]: r["signals"] for r in per_query}
    else:
        texts = rewrite_queries(queries, config.rewrite_rules(p, kb.index.passages))
        signals, retrieval = question_signals(kb.index, texts, embed_texts(texts), p), None
    source = "shipped"
    if gate is None:
        gate, _ = step_threshold(per_query, p, {"kb": str(kb_folder), "queries": str(queries_path)})
        source = f"fitted here on {len(queries)} questions of {queries_path} (in-sample)"
    scores = gate.scores(signals)
    with llm_url(p, warn) as url:
        answers = step_answer(kb.index, queries, kb.docs, p, gate.tau, url, scores, progress)
    final_rows, final = step_final(answers, queries, kb.docs, p, gate.tau, kb.sentences, scorer, judge)
    asr = {q["id"]: q["asr"] for q in queries}
    rows = [{"id": a["id"], "asr": asr[a["id"]], "query": a["query"],
             "retrieved": [[d, s] for d, s in zip(a["retrieved"], a["retrieved_scores"])],
             "gate_score": a["score"], "tau": gate.tau, "status": f["status"], "reason": f["reason"],
             "say": f["say"], "source": f["source"], "llm_error": a["error"]} for a, f in zip(answers, final_rows)]
    fitted = {"artifact": gate.to_dict()} if source != "shipped" else {}  # what `rag run --save-gate` writes
    out = {"gate": {"signal": gate.signal, "tau": gate.tau, "source": source, "fitted_on": gate.fitted_on, **fitted},
           "kb": {"folder": str(kb_folder), "passages": len(kb.index.passages), "cached": kb.cached},
           "final": final, "latency": latency_metrics(answers), "answers": rows}
    return {**out, "retrieval": retrieval} if labelled else out
