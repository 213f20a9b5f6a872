"""Build the library's settings objects from a params mapping (the shape of params.yaml).

Pure: takes a dict, never reads a file. Used by the DVC stages and the CLI alike.
"""
from __future__ import annotations

import math
import operator
import re
from dataclasses import replace
from pathlib import Path
from typing import Mapping, Sequence

from rag.memory.preferences import PreferenceRules
from rag.memory.recall import EvidencePolicy
from rag.voice import quarantine, selection
from rag.voice.answer import AnswerSettings
from rag.retrieval.chunk import Passage
from rag.voice.followup import FollowUpRules
from rag.voice.rewrite import RewriteRules, contrast_pairs
from rag.retrieval.indexes import fusion_weights
from rag.retrieval.search import HybridConfig
from rag.voice.verify import VerifyRules, split_sentences


def number(p: Mapping, section: str, key: str, kind: type = float, above: float | None = None,
           at_least: float | None = None, below: float | None = None, at_most: float | None = None) -> float | int:
    """``p[section][key]`` as ``kind``; ValueError naming ``section.key`` unless it is a (non-bool) number, for
    ``kind`` int a whole and finite one (``2.5``, ``.inf``, ``.nan`` are not counts), and within the bounds given
    (``above`` / ``below`` exclusive, ``at_least`` / ``at_most`` inclusive; a bounded value must be finite)."""
    v = p[section][key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{section}.{key} must be a number, got {v!r}")
    if kind is int and not (math.isfinite(v) and float(v).is_integer()):
        raise ValueError(f"{section}.{key} must be a whole number, got {v!r}")
    limits = [(bound, sign, holds) for bound, sign, holds in ((above, ">", operator.gt), (at_least, ">=", operator.ge),
                                                              (below, "<", operator.lt), (at_most, "<=", operator.le))
              if bound is not None]
    if limits and not (math.isfinite(v) and all(holds(v, bound) for bound, _, holds in limits)):
        raise ValueError(f"{section}.{key} must be a finite number "
                         f"{' and '.join(f'{sign} {bound}' for bound, sign, _ in limits)}, got {v!r}")
    return kind(v)


def words(p: Mapping, section: str, key: str) -> tuple[str, ...]:
    """``p[section][key]`` as a tuple of words; ValueError naming ``section.key`` unless it is a list of strings
    (a YAML ``true``/``false`` in a word list is a boolean: quote it)."""
    v = p[section][key]
    if v is None:
        return ()
    if not isinstance(v, list):
        raise ValueError(f"{section}.{key} must be a list of words, got {v!r}")
    bad = sorted(repr(w) for w in v if not isinstance(w, str))
    if bad:
        raise ValueError(f"{section}.{key} must be a list of words, got {', '.join(bad)} (quote them)")
    return tuple(v)


def mapping(p: Mapping, section: str, key: str) -> Mapping:
    """``p[section][key]``; ValueError naming ``section.key`` unless it is a mapping."""
    v = p[section][key]
    if not isinstance(v, Mapping):
        raise ValueError(f"{section}.{key} must be a mapping, got {v!r}")
    return v


def text(p: Mapping, section: str, key: str) -> str:
    """``p[section][key]``; ValueError naming ``section.key`` unless it is a string with something to say (what the
    caller hears: the refusal, the clarifying question)."""
    v = p[section][key]
    if not isinstance(v, str) or not v.strip():
        raise ValueError(f"{section}.{key} must be a non-empty string, got {v!r}")
    return v


def is_postgres_url(url: str) -> bool:
    """Whether ``url`` names a PostgreSQL server (``postgresql://`` or ``postgres://``, libpq's two schemes)."""
    return url.startswith(("postgresql://", "postgres://"))


def redact_url(url: object) -> str:
    """What an error may show of a store URL: its scheme only (``postgresql://...``; credentials never), or the
    ``repr`` of a value without one."""
    return url.split("://")[0] + "://..." if isinstance(url, str) and "://" in url else repr(url)


def without_credentials(url: object) -> str:
    """What a message may show of a server URL (``llm.url``, ``--llm-url``): the URL with any ``user:password@``
    taken out (``http://127.0.0.1:8080/v1``), or `redact_url` of a value that does not parse as one."""
    from urllib.parse import urlsplit, urlunsplit

    if not isinstance(url, str):
        return repr(url)
    if "@" not in url:
        return url
    try:
        u = urlsplit(url)
        return urlunsplit(u._replace(netloc=u.netloc.rpartition("@")[2])) if "@" in u.netloc else url
    except ValueError:
        return redact_url(url)


def is_http_url(url: str) -> bool:
    """Whether ``url`` is an http(s) URL with a host, a valid port (0-65535) and no whitespace."""
    from urllib.parse import urlsplit

    if re.search(r"\s", url):
        return False
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (ValueError for a port that is no number in 0-65535)
    except ValueError:  # "http://[::1" (an unclosed IPv6 bracket), "http://x:99999"
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def check(p: Mapping) -> None:
    """Build every voice-track settings object from ``p`` once, so a bad value fails (ValueError, KeyError,
    TypeError naming the key) before any model is started or called: ``llm.url`` empty or an http(s) URL, and
    ``llm.local_model`` a `rag.llm.registry.MODELS` name when it is empty; ``retrieval.store`` empty or a
    PostgreSQL URL; what the caller hears (``answer.refusal``, ``memory.clarify``) non-empty text; ``select.min_score``
    (`min_scores`); ``embed.model`` one of ``embed.encoders`` (`encoder`)."""
    url = p["llm"]["url"]
    if not isinstance(url, str) or (url and not is_http_url(url)):
        raise ValueError("llm.url must be empty (start the packaged model) or an http(s):// URL, got "
                         f"{without_credentials(url)!r}")
    store = p["retrieval"].get("store") or ""
    if not isinstance(store, str) or (store and not is_postgres_url(store)):
        raise ValueError(f"retrieval.store must be empty or a postgresql:// URL, got {redact_url(store)}")
    text(p, "memory", "clarify")
    number(p, "memory", "ttl_min", above=0)
    number(p, "memory", "retention_days", above=0)
    number(p, "memory", "max_turns", int, at_least=1)
    number(p, "threshold", "epsilon", at_least=0, below=1)
    rewrite_rules(p)
    verify_rules(p)
    quarantine.allowed(p)
    answer_settings(p, 0.0)
    follow_up_rules(p)
    evidence_policy(p)
    preference_rules(p)
    min_scores(p)
    encoder(p)
    if not p["llm"]["url"]:
        number(p, "llm", "n_ctx", int, at_least=0)  # 0: the model's own context length (llama.cpp)
        number(p, "llm", "threads", int, at_least=1)
        if "n_parallel" in p["llm"]:
            number(p, "llm", "n_parallel", int, at_least=1)
        from rag.llm.registry import DEFAULT, get

        get(str(p["llm"].get("local_model", DEFAULT)))  # ValueError naming the known models


def encoder(p: Mapping, root: str | Path = ".", name: str | None = None):
    """The English chain's encoder: ``p["embed"]["encoders"][p["embed"]["model"]]`` (or the entry ``name``) as a
    `rag.retrieval.embed.Encoder` (``family`` minilm | e5, ``file`` relative to ``root`` unless absolute, ``sha256``;
    e5 only, ``query_file`` / ``query_sha256``: the question side's file; an entry with no file is the packaged
    all-MiniLM-L6-v2). Raises ValueError naming ``embed.model`` for a name ``embed.encoders`` lacks, or naming the
    entry's key for a bad one (a sha256: 64 hex digits, either case); nothing is read here
    (`rag.retrieval.embed.Encoder.verified` checks the files)."""
    from rag.retrieval.embed import Encoder

    e = p["embed"]
    name, table = e["model"] if name is None else name, mapping(p, "embed", "encoders")
    if not isinstance(name, str) or name not in table:
        raise ValueError(f"{'embed.model' if e['model'] == name else 'an encoder name'} must be one of "
                         f"embed.encoders {sorted(table)}, got {name!r}")
    entry = table[name]
    keys = ("family", "file", "sha256", "query_file", "query_sha256")
    if not isinstance(entry, Mapping) or set(entry) - set(keys):
        raise ValueError(f"embed.encoders.{name} must be a mapping of {', '.join(keys)}, got {entry!r}")
    family = entry.get("family", "minilm")
    if not isinstance(family, str):
        raise ValueError(f"embed.encoders.{name}.family must be minilm or e5, got {family!r}")
    files, shas = {}, {}
    for key in ("file", "query_file"):
        file = entry.get(key)
        if file is not None and (not isinstance(file, str) or not file):
            raise ValueError(f"embed.encoders.{name}.{key} must be a path, got {file!r}")
        files[key] = Path(root) / file if file else None
    for key in ("sha256", "query_sha256"):
        sha = entry.get(key)
        if sha is not None and not (isinstance(sha, str) and re.fullmatch(r"[0-9a-fA-F]{64}", sha)):
            raise ValueError(f"embed.encoders.{name}.{key} must be 64 hex digits (quote it), got {sha!r}")
        shas[key] = sha.lower() if sha else None
    return Encoder(name, family, files["file"], shas["sha256"], files["query_file"], shas["query_sha256"])


def rewrite_rules(p: Mapping, passages: Sequence[Passage] = ()) -> RewriteRules:
    """``p["rewrite"]``: fillers, units, tens, openers, weekdays and the number words of `rag.voice.numbers` (scales,
    articles, joiners, fractions, past_words, to_words, zero_words); swap classes are the non-day slots
    of ``p["verify"]["slots"]`` (one table for both: a service swapped in a follow-up is the same
    service the verifier checks), then the word pairs the KB's ``passages`` contrast
    (`rag.voice.rewrite.contrast_pairs` over their sentences)."""
    def table(key):
        return dict(mapping(p, "rewrite", key))

    swap = tuple(tuple(t for terms in values.values() for t in terms)
                 for slot, values in mapping(p, "verify", "slots").items() if slot != "day")
    rules = RewriteRules(fillers=words(p, "rewrite", "fillers"), units=table("units"), tens=table("tens"),
                         openers=words(p, "rewrite", "openers"), weekdays=words(p, "rewrite", "weekdays"),
                         scales=table("scales"), articles=words(p, "rewrite", "articles"),
                         joiners=words(p, "rewrite", "joiners"), fractions=table("fractions"),
                         past_words=words(p, "rewrite", "past_words"), to_words=words(p, "rewrite", "to_words"),
                         zero_words=words(p, "rewrite", "zero_words"), swap_classes=swap)
    if not passages:
        return rules
    pairs = contrast_pairs((s for x in passages for s in split_sentences(x.text)), rules)
    return replace(rules, swap_classes=swap + pairs)


def hybrid_config(p: Mapping) -> HybridConfig:
    """``p["retrieval"]``: rrf_k, depth, weights, bm25 stopwords / min_token_len / floor / engine, phonetic list,
    the dense index (exact | hnsw and its m, ef_construction, ef_search), fusion, convex_weights and sentence_weight."""
    r = p["retrieval"]
    def num(key, kind=float, **bounds):
        return number(p, "retrieval", key, kind, **bounds)

    # an RRF weight must be finite (.inf made every fused score inf: a scikit-learn error deep inside the gate)
    return HybridConfig(rrf_k=num("rrf_k", int, at_least=0), depth=num("depth", int, at_least=1),
                        weights=(num("weight_dense", at_least=0), num("weight_bm25", at_least=0)),
                        stopwords=frozenset(words(p, "retrieval", "stopwords")) if r["use_stopwords"] else frozenset(),
                        min_token_len=num("min_token_len", int, at_least=0), bm25_floor=num("bm25_floor", at_least=0),
                        phonetic_weight=num("phonetic_weight", at_least=0), phonetic_encoder=str(r["phonetic_encoder"]),
                        phonetic_ngram=num("phonetic_ngram", int, at_least=0), index=str(r["index"]),
                        hnsw=(num("hnsw_m", int, at_least=2, at_most=256), num("hnsw_ef_construction", int, at_least=1),
                              num("hnsw_ef_search", int, at_least=1)),
                        bm25_engine=str(r["bm25_engine"]), fusion=str(r["fusion"]),
                        convex_weights=fusion_weights(r["convex_weights"], "retrieval.convex_weights", 3),
                        sentence_weight=num("sentence_weight", at_least=0))


def gate_retrieval(p: Mapping) -> dict:
    """The ``p["retrieval"]`` settings the gate's signals depend on (`rag.voice.abstain.features`: BM25 tokenizer and
    floor, RRF k, depth and weights; coverage's stopwords), recorded in and checked against a shipped gate."""
    import hashlib

    h = hybrid_config(p)
    stop = sorted(words(p, "retrieval", "stopwords"))
    return {"rrf_k": h.rrf_k, "depth": h.depth, "weights": list(h.weights), "use_stopwords": bool(h.stopwords),
            "stopwords_sha256": hashlib.sha256("\n".join(stop).encode()).hexdigest()[:16],
            "min_token_len": h.min_token_len, "bm25_floor": h.bm25_floor, "bm25_engine": h.bm25_engine}


def verify_rules(p: Mapping) -> VerifyRules:
    """``p["verify"]``: slots, groups, negations, answer_types, function_words, min_coverage."""
    v = p["verify"]
    if not isinstance(v["answer_types"], Mapping):
        raise ValueError(f"verify.answer_types must map a type name to its cues and pattern, got {v['answer_types']!r}")
    slots = mapping(p, "verify", "slots")
    bad = [k for k, vals in slots.items() if not isinstance(vals, Mapping)]
    if bad:
        raise ValueError(f"verify.slots.{bad[0]} must map a value to its terms, got {slots[bad[0]]!r}")
    return VerifyRules(slots={k: dict(vals) for k, vals in slots.items()}, groups=dict(mapping(p, "verify", "groups")),
                       negations=words(p, "verify", "negations"), answer_types=dict(v["answer_types"]),
                       function_words=words(p, "verify", "function_words"), min_coverage=number(p, "verify", "min_coverage"))


def answer_settings(p: Mapping, tau: float) -> AnswerSettings:
    """``p["answer"]`` (deadline_s and reserve_s included), ``p["llm"]`` and ``p["retrieval"]["mode"]``, with the
    fitted ``tau``."""
    a, llm = p["answer"], p["llm"]
    return AnswerSettings(k=number(p, "retrieval", "k", int), mode=p["retrieval"]["mode"], tau=float(tau),
                          refusal=text(p, "answer", "refusal"), answer_mode=a["mode"],
                          max_len=number(p, "answer", "max_len", int, at_least=1),
                          max_tokens=number(p, "llm", "max_tokens", int, at_least=1), timeout_s=number(p, "llm", "timeout_s", above=0),
                          temperature=number(p, "llm", "temperature", at_least=0), seed=number(p, "llm", "seed", int),
                          model=llm.get("model") or None, hybrid=hybrid_config(p),
                          min_sentence_cosine=number(p, "answer", "min_sentence_cosine"),
                          sentence_stemmer=text(p, "answer", "sentence_stemmer"),
                          sentence_fusion=text(p, "answer", "sentence_fusion"),
                          deadline_s=number(p, "answer", "deadline_s"), reserve_s=number(p, "answer", "reserve_s"),
                          context=text(p, "llm", "context"),
                          context_max_chars=number(p, "llm", "context_max_chars", int, at_least=1))


def min_scores(p: Mapping) -> dict[str, float]:
    """``select.min_score`` as ``{design: min_score}`` for the learned designs given a value there (null: the
    value fitted with the model, models/selection-{design}.json). Raises ValueError naming the key for a design
    that has no threshold (``rules``, ``listwise``, unknown names) or a value outside [0, 1]."""
    given = mapping(p, "select", "min_score")
    out = {}
    for design, value in given.items():
        if design not in selection.THRESHOLDED:
            raise ValueError(f"select.min_score: {design!r} has no min_score ({', '.join(selection.THRESHOLDED)})")
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
            raise ValueError(f"select.min_score.{design} must be null or a number in [0, 1], got {value!r}")
        out[design] = float(value)
    return out


def answer_scorer(p: Mapping, design: str | None = None, key: str = "select.design", root: str | Path = "."):
    """The shipped answer-selection scorer of ``design`` (default ``select.design``) from ``root``/
    ``select.model_dir`` (`rag.voice.selection.load_scorer`; None for ``rules``), at ``select.min_score``'s value
    for it when one is set (`min_scores`), else at the value fitted with it. Raises ValueError (naming ``key``) for
    an unknown design or a bad ``select.min_score``, InputError for a missing or bad model file."""
    s = p["select"]
    design = design or s["design"]
    return selection.load_scorer(design, Path(root) / s["model_dir"], key, s["e5_model"], min_scores(p).get(design))


def follow_up_rules(p: Mapping) -> FollowUpRules:
    """``p["memory"]``: the follow-up cues of `rag.voice.followup.FollowUpRules` (pronouns, weak_pronouns, not_referring,
    topic_share, conjunctions, question_words, fragment_words)."""
    return FollowUpRules(pronouns=words(p, "memory", "pronouns"), weak_pronouns=words(p, "memory", "weak_pronouns"),
                         not_referring=words(p, "memory", "not_referring"),
                         topic_share=number(p, "memory", "topic_share"),
                         conjunctions=words(p, "memory", "conjunctions"),
                         question_words=words(p, "memory", "question_words"),
                         fragment_words=number(p, "memory", "fragment_words", int))


def evidence_policy(p: Mapping) -> EvidencePolicy:
    """``p["memory"]["evidence"]``: which earlier turns of a call the LLM sees (`rag.memory.recall.EvidencePolicy`);
    ValueError naming ``memory.evidence.<key>`` for a value that is not a number or out of range."""
    ev = {"memory.evidence": mapping(p, "memory", "evidence")}
    return EvidencePolicy(min_cosine=number(ev, "memory.evidence", "min_cosine"),
                          max_items=number(ev, "memory.evidence", "max_items", int),
                          max_chars=number(ev, "memory.evidence", "max_chars", int))


def preference_rules(p: Mapping) -> PreferenceRules:
    """``p["memory"]["preferences"]["fields"]``: ``{field: {means, referents, mention}}`` as
    `rag.memory.preferences.PreferenceRules` (``max_len`` from ``memory.preferences.max_len``; a clause's question
    words from ``memory.question_words``; skipped before it: ``rewrite.fillers``, ``memory.conjunctions``, "yeah",
    "yes", "hey", "there", "by the way"); ValueError naming the key of a missing or malformed entry."""
    prefs = mapping(p, "memory", "preferences")
    fields = prefs.get("fields")
    if not isinstance(fields, Mapping) or not fields:
        raise ValueError("memory.preferences.fields must be a mapping of field -> {means, referents, mention}")
    for key in ("days", "max_tokens", "timeout_s"):  # read by rag.voice.pipeline (retention, the summary's LLM call)
        number({"memory.preferences": prefs}, "memory.preferences", key)
    for name, f in fields.items():
        if not isinstance(f, Mapping) or not all(k in f for k in ("means", "referents", "mention")):
            raise ValueError(f"memory.preferences.fields.{name} needs means, referents and mention")
        words({name: f}, name, "referents")
        text({name: f}, name, "means")
    return PreferenceRules(fields={n: f["means"] for n, f in fields.items()},
                           referents={n: tuple(f["referents"]) for n, f in fields.items()},
                           mentions={n: text({n: f}, n, "mention") for n, f in fields.items()},
                           searched_as={n: text({n: f}, n, "searched_as") for n, f in fields.items() if "searched_as" in f},
                           max_len=number({"memory.preferences": prefs}, "memory.preferences", "max_len", int),
                           question_words=frozenset(words(p, "memory", "question_words")),
                           skip_words=frozenset(w for w in words(p, "rewrite", "fillers") + words(p, "memory", "conjunctions")
                                                + ("yeah", "yes", "hey", "there", "by", "the", "way") if " " not in w))


def kb_store(p: Mapping, env: Mapping[str, str] | None = None) -> str:
    """Where the KB's dense index is served from: ``$RAG_KB_STORE`` when set, else ``p["retrieval"]["store"]``
    ("" = in process; a PostgreSQL URL = pgvector, `rag.retrieval.pgvector`). Raises InputError naming the variable
    when ``$RAG_KB_STORE`` is not a PostgreSQL URL (``retrieval.store`` is checked by `check`)."""
    import os

    from rag.io import InputError

    env = os.environ if env is None else env
    url = env.get("RAG_KB_STORE")
    if url and not is_postgres_url(url):
        raise InputError(f"$RAG_KB_STORE must be a postgresql:// URL, got {redact_url(url)}")
    return url or str(p["retrieval"].get("store") or "")
