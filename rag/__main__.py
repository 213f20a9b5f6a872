"""Command line: ``rag run KB_FOLDER QUERIES.jsonl``, ``rag ask "question" [--kb KB_FOLDER] [--session ID]``,
``rag ask --wav QUESTION.wav [--say ANSWER.wav]``, ``rag chat [--kb KB_FOLDER] [--session ID] [--wav-lines]``,
``rag forget --session ID``, ``rag compare``.

``run`` answers every question of a queries file (only ``id`` and ``asr`` needed) from a folder of Markdown
files with the shipped gate (models/gate.json, fitted on the clinic fixture); labelled questions also get the
metrics, and ``--fit-gate`` refits the gate on them instead (in-sample). ``ask`` answers one question (Korean
or English; the track is detected by Hangul characters when not given) and shows the evidence. ``chat`` is a
call: a question per line, follow-ups resolved from the call's earlier turns (`rag.voice.followup`), the turns kept in
a memory store (`rag.memory`; ``ask --session`` adds one turn to a call, ``forget`` deletes one). ``--wav`` takes
the question as audio (any format PyAV decodes), transcribed by params.yaml ``speech.engine`` or ``--asr``
(`rag.voice.asr`); ``--say`` speaks the reply into a WAV with piper (`rag.voice.tts`). The KB is
embedded once and cached by content hash (`rag.retrieval.kb_cache`). Bad input exits 2 with one line naming the file and
line. Korean: BM25 over Kiwi morphemes on ``--kb``'s paragraphs (each led by its heading) or, without ``--kb``, on
``ko.data_dir``/passages.jsonl; `rag.ko.answer`.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import sys
import unicodedata
import warnings
from pathlib import Path

_HANGUL = re.compile(r"[\uac00-\ud7a3\u1100-\u11ff\u3130-\u318f]")
ROOT = Path(__file__).resolve().parent.parent  # the checkout: params.yaml, models/, fixtures/
COMPARE_TABLES = ("metrics/ko/retrieval.md", "metrics/voice/compare.md")
STATUSES = ("Statuses: llm = the model's answer, verified against the cited document (reason verified); extractive = "
            "a KB sentence said instead (the reason says why); refused = the caller is transferred (gate score under "
            "tau, or nothing verifiable to say).")
CLINIC_KB = str(ROOT / "fixtures" / "voice" / "kb")  # --kb's default on the voice track
PATH_KEYS = (("select", "model_dir"), ("ko", "data_dir"))  # params paths, relative to the params file's folder


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rag", description=(
        "Grounded answers to speech-recogniser transcripts from a knowledge base (a folder of Markdown files): "
        "answer a questions file (run), one question (ask) or a call of several (chat); delete a call's turns "
        "(forget); load a KB into PostgreSQL + pgvector (index); print the committed retrieval compare tables "
        "(compare). Each command has its own --help."))
    sub = parser.add_subparsers(dest="command", required=True)

    def asr_engine(sp):
        from rag.voice.asr import ENGINES

        sp.add_argument("--asr", choices=ENGINES, help="the recogniser for audio questions (default: params.yaml "
                                                       "speech.engine)")

    def common(sp):
        sp.add_argument("--params", default=str(ROOT / "params.yaml"),
                        help="a params file holding only what it changes from the project's params.yaml (e.g. "
                             "answer: {refusal: ...}); relative paths inside it are relative to its folder")
        sp.add_argument("--llm-url", help="use this OpenAI-compatible server instead of starting the packaged one")
        sp.add_argument("--gate", default=str(ROOT / "models" / "gate.json"),
                        help="the gate file to apply (default: the shipped models/gate.json)")
        sp.add_argument("--cache-dir", help="where embedded KBs are kept (default: $RAG_CACHE_DIR or "
                                            "~/.cache/voice-rag)")
        sp.add_argument("--explain", action="store_true",
                        help="also show the rewritten query, retrieved documents with scores, gate score vs tau")
        sp.add_argument("--json", action="store_true", help="print machine-readable JSON instead of text")

    run = sub.add_parser("run", help="answer every question of a queries file from a KB folder",
                         description=STATUSES)
    run.add_argument("kb", help="folder of *.md files (# Title, paragraphs separated by blank lines)")
    run.add_argument("queries", help="queries.jsonl: id, asr required; context (an earlier id) optional; labels "
                                     "relevant, answerable, facts optional (then metrics are printed)")
    run.add_argument("--fit-gate", action="store_true",
                     help="refit the gate on these labelled questions instead of applying the shipped one, for this "
                          "run (in-sample: its refusal numbers are optimistic); --save-gate keeps it")
    run.add_argument("--save-gate", metavar="FILE",
                     help="with --fit-gate (implied): also write the fitted gate to FILE, for --gate FILE in ask, "
                          "chat and run")
    common(run)
    ask_p = sub.add_parser("ask", help="answer one question (Korean or English) and show the evidence",
                           description=STATUSES)
    ask_p.add_argument("question", nargs="?", help="the question as typed or as the recogniser heard it (or --wav)")
    ask_p.add_argument("--wav", help="the question as audio (WAV or any format PyAV decodes), transcribed first")
    ask_p.add_argument("--say", metavar="OUT.wav", help="also speak the reply into this WAV (piper joe-us voice, "
                                                        "22,050 Hz mono 16-bit)")
    asr_engine(ask_p)
    ask_p.add_argument("--kb", help="folder of *.md files (default: the clinic KB; for a Korean question, the "
                                    "KorQuAD passages of params.yaml ko.data_dir)")
    turn = ask_p.add_mutually_exclusive_group()
    turn.add_argument("--context", help="the previous question, for a follow-up (\"and on sunday?\")")
    turn.add_argument("--session", help="a call's id: the question is resolved against the call's earlier turns "
                                        "(kept in the memory store, see chat) and recorded as its next turn")
    ask_p.add_argument("--track", choices=("ko", "voice"), help="default: ko if the question has Hangul")
    ask_p.add_argument("--caller", help="the caller's id (e.g. phone number), stored only as a keyed hash")
    common(ask_p)
    chat = sub.add_parser("chat", help="a call: one question per line on stdin, follow-ups resolved from the call",
                          description=STATUSES + " Follow-ups (\"what about sunday\", \"when does she work\", \"and "
                          "for a cat\") are resolved from the call's earlier turns; one with nothing before it gets a "
                          "clarifying question. Turns are kept in memory.url ($RAG_MEMORY_URL; default an embedded "
                          "SQLite file in the cache folder) for memory.ttl_min minutes.")
    chat.add_argument("--kb", default=CLINIC_KB,
                      help="folder of *.md files (default: the clinic KB)")
    chat.add_argument("--session", help="continue this call (default: a new id, printed)")
    chat.add_argument("--caller", help="the caller's id (e.g. phone number), stored only as a keyed hash. When the "
                      "call ends, the LLM notes what the caller said about themselves (memory.preferences.fields: "
                      "insurance, pet, day); in their next call \"my insurance\" is searched with the stored value "
                      "in its place, and the answer says so (\"You told us you have aetna.\")")
    chat.add_argument("--wav-lines", action="store_true",
                      help="each line is the path of an audio file holding the question (transcribed first)")
    asr_engine(chat)
    common(chat)
    forget = sub.add_parser("forget", help="delete a call's turns from every memory store",
                            description="Delete every turn of a call from the short-term store (memory.url or "
                            "$RAG_MEMORY_URL), the archive (memory.archive_url or $RAG_MEMORY_ARCHIVE_URL) and the "
                            "embedded SQLite store; exits 1 naming a store that could not be reached.")
    forget.add_argument("--session", required=True, help="the call's id")
    forget.add_argument("--params", default=str(ROOT / "params.yaml"),
                        help="a params file holding only what it changes from the project's params.yaml")
    forget.add_argument("--cache-dir", help="where the embedded SQLite store is (default: $RAG_CACHE_DIR or "
                                            "~/.cache/voice-rag)")
    index = sub.add_parser("index", help="load a KB folder into PostgreSQL + pgvector (ask, run and chat then "
                                         "rank passages there when retrieval.store or $RAG_KB_STORE names it)",
                           description="Embed a KB folder and store its passages and vectors in PostgreSQL with "
                           "pgvector; ask, run and chat then rank passages there when retrieval.store or "
                           "$RAG_KB_STORE names the database.")
    index.add_argument("--kb", required=True, help="folder of *.md files")
    index.add_argument("--store", help="postgresql://... (default: retrieval.store or $RAG_KB_STORE)")
    index.add_argument("--params", default=str(ROOT / "params.yaml"),
                       help="a params file holding only what it changes from the project's params.yaml")
    index.add_argument("--cache-dir", help="where embedded KBs are kept (default: $RAG_CACHE_DIR or "
                                           "~/.cache/voice-rag)")
    sub.add_parser("compare", help="print the retrieval compare tables",
                   description="Print the project's committed retrieval tables (metrics/voice/compare.md on the "
                   "clinic fixture, metrics/ko/retrieval.md on KorQuAD), whatever your own KB is: rag run KB "
                   "QUESTIONS measures yours.")
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = _parser().parse_args(argv)
    warnings.showwarning = lambda message, *_, **__: _warn(str(message))  # one line, not Python's file:line + source
    if args.command == "compare":
        return _compare()

    from rag.voice.gate import GateMismatch, ThresholdError
    from rag.io import InputError, normalise_text

    # SIGTERM unwinds like Ctrl-C, so a started LLM server is stopped in its `finally`; the caller's handler comes
    # back on return (a caller that forks workers afterwards must not hand them this one: a Pool.terminate() then
    # hung on a worker whose SIGTERM only set a flag).
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        _check_args(args)
        p = _params(args.params)
        if args.command == "forget":
            return _forget(p, args)
        if args.command == "index":
            return _index(p, args)
        if args.llm_url:
            _use_llm_url(p, args.llm_url)
        if args.command == "ask":
            if (args.question is None) == (args.wav is None):
                raise InputError("give the question as text or as --wav FILE (one of the two)")
            heard = _hear(args.wav, p, args) if args.wav else None
            question = heard.text if heard else normalise_text(args.question)  # as KB text is: NFKC, NFC for Hangul
            if not question.strip() or all(unicodedata.category(c) in ("Cf", "Zs") for c in question.strip()):
                # only spaces and invisible format characters (U+200B, U+FEFF): nothing was asked
                raise InputError(f"{args.wav}: the recogniser heard nothing" if heard else "the question is empty")
            track = args.track or ("ko" if _HANGUL.search(question) else "voice")
            if track == "voice" and args.kb is None:
                args.kb = CLINIC_KB
                print(f"note: no --kb: answering from the example clinic KB ({CLINIC_KB})", file=sys.stderr)
            if track == "ko":
                _check_ko_args(question, args)
            if args.say:  # checked before the turn is answered or kept in memory
                _check_output_file("--say", args.say, "the WAV file")
            return _ask_ko(question, p, args) if track == "ko" else _ask_voice(question, p, args, heard)
        if args.command == "chat":
            return _chat(p, args)
        return _run(p, args)
    except GateMismatch as e:
        print(f"error: {args.gate}: {e} (fit one for these settings: `rag run KB QUERIES --save-gate FILE` on labelled "
              "questions, then `--gate FILE`; or `dvc repro threshold`)", file=sys.stderr)
        return 2
    except ThresholdError as e:  # the labels of the questions file cannot fit a gate (run --fit-gate)
        print(f"error: {getattr(args, 'queries', args.params)}: {e}", file=sys.stderr)
        return 2
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyError as e:
        print(f"error: {args.params}: missing key {e}", file=sys.stderr)
        return 2
    except (ValueError, TypeError) as e:
        print(f"error: {args.params}: bad value ({e})", file=sys.stderr)
        return 2
    except (ConnectionError, LookupError) as e:  # the KB store (retrieval.store / $RAG_KB_STORE) is down or lacks the KB
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C while the KB is embedded or a question is answered: no traceback
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


def _use_llm_url(p: dict, url: str) -> None:
    """``p``'s ``llm.url`` set to ``--llm-url``; raises InputError naming the option (not the params file) when
    `rag.config.check` rejects it."""
    from rag import config
    from rag.io import InputError

    p["llm"]["url"] = url
    try:
        config.check(p)
    except ValueError as e:
        if str(e).startswith("llm.url"):
            raise InputError(f"--llm-url: {e}") from None
        raise


def _check_args(args) -> None:
    """Raises InputError for an option that would otherwise be ignored or misread: an empty ``--kb``, ``--cache-dir``,
    ``--llm-url`` or ``--caller`` (an empty --kb read the current folder, an empty --cache-dir the home cache), a
    ``--cache-dir`` that is a file or lies under one."""
    from rag.io import InputError

    for option in ("kb", "cache_dir", "llm_url", "caller"):
        value = getattr(args, option, None)
        if value is not None and not value.strip():
            raise InputError(f"--{option.replace('_', '-')} is empty: give a value, or leave the option out")
    cache = getattr(args, "cache_dir", None)
    if cache is not None:
        there = next(d for d in (Path(cache), *Path(cache).absolute().parents) if d.exists())
        if not there.is_dir():
            raise InputError(f"--cache-dir {cache}: " + ("a file, not a folder" if there == Path(cache) else
                                                         f"{there} is a file, not a folder"))


def _check_ko_args(question: str, args) -> None:
    """Raises InputError for what the Korean track cannot do: a question without Hangul (``--track ko`` on English:
    the Korean sentence rules misread "a.m."), or an option only the voice track reads."""
    from rag.io import InputError

    if not _HANGUL.search(question):
        raise InputError("--track ko needs a Korean question (Hangul); English questions go to the voice track")
    voice_only = [f"--{o}" for o in ("session", "say", "context", "caller") if getattr(args, o)]
    if args.gate != str(ROOT / "models" / "gate.json"):
        voice_only.append("--gate")
    if voice_only:
        raise InputError(f"{', '.join(voice_only)}: for the voice track (English) only")


def _check_output_file(option: str, path: str, what: str) -> None:
    """Before any work: ``path`` (the value of ``option``) can name a file to write: not empty, not a folder, not under
    a file (missing folders are made when it is written). Raises InputError naming the option and ``what`` it wants."""
    from rag.io import InputError

    if not path.strip() or Path(path).is_dir():
        raise InputError(f"{option} {path!r}: {'a folder' if path.strip() else 'empty'}; give {what}")
    if any(d.exists() and not d.is_dir() for d in Path(path).parents):
        raise InputError(f"{option} {path!r}: lies under a file")


def _params(path: str) -> dict:
    """The project's params.yaml, overridden key by key by the file at ``path`` when it is another one (mappings
    merged, lists and values replaced): a user's params file holds only what it changes. Makes ``embed.model`` the
    process-wide encoder. Raises InputError as `rag.io.read_params` does, ValueError for a bad ``embed.model``."""
    from rag.io import read_params

    default = ROOT / "params.yaml"
    p = _with_paths(read_params(default), ROOT)
    if Path(path).resolve() != default.resolve():
        over = _with_paths(read_params(path), Path(path).resolve().parent)
        _merge(p, over, path)
        _check_tables(p["verify"], "groups" in (over.get("verify") or {}), path)
    from rag import config
    from rag.retrieval.embed import use_encoder

    use_encoder(_check_encoder(p, path))
    return p


def _check_encoder(p: dict, path: str):
    """``embed.model``'s `rag.retrieval.embed.Encoder` (`rag.config.encoder`), its file checked before any
    question: its sha256 (`Encoder.verified`) and, loaded, its family (`Encoder.check_inputs`). Raises InputError
    naming ``path`` and the key, ValueError (`rag.config.encoder`) for a bad entry."""
    from rag import config
    from rag.io import InputError
    from rag.retrieval.embed import query_embedder, use_encoder

    try:
        encoder = config.encoder(p).verified()
        if encoder.file is not None:  # the packaged MiniLM is read from its wheel: nothing to check
            use_encoder(encoder)
            query_embedder()
        return encoder
    except InputError as e:
        raise InputError(f"{path}: {e}") from None


def _check_tables(verify: dict, own_groups: bool, path: str) -> None:
    """The slot and group tables (`OPEN_TABLES`) after a user's params file ``path`` replaced some, well-formed
    before any question reaches them: ``verify.slots.{slot}.{value}`` a non-empty list of terms, each a string with
    a letter or digit (a term with none, "" or "?!", matches every text and switches the slot's check off); when the
    file gives its own groups (``own_groups``), ``verify.groups.{group}`` a list of values of some slot. Raises
    InputError naming ``path`` and the key. (`rag.config.verify_rules` checks the shapes around them, and the
    answer types' cues and patterns.)"""
    import re

    from rag.io import InputError

    slots, groups = verify.get("slots"), verify.get("groups")
    values = set()
    for slot, table in (slots.items() if isinstance(slots, dict) else ()):
        for value, terms in (table.items() if isinstance(table, dict) else ()):
            if not (isinstance(terms, list) and terms
                    and all(isinstance(t, str) and re.search(r"\w", t) for t in terms)):
                raise InputError(f"{path}: verify.slots.{slot}.{value} must be a non-empty list of terms, each with a "
                                 f"letter or digit, got {terms!r}")
            values.add(value)
    for group, members in (groups.items() if own_groups and isinstance(groups, dict) else ()):
        if not (isinstance(members, list) and all(isinstance(m, str) and m in values for m in members)):
            raise InputError(f"{path}: verify.groups.{group} must be a list of slot values (verify.slots), got "
                             f"{members!r}")


OPEN_TABLES = ("verify.slots", "verify.answer_types", "verify.groups")  # a KB's own tables: any key, and replaced whole
OPEN_MAPPINGS = ("embed.encoders",)  # any key (a user's own encoder), merged: checked by `_check_encoder`


def _merge(base: dict, over: dict, path: str, at: str = "") -> None:
    """``over`` merged into ``base`` key by key (mappings merged, lists and values replaced). A KB's own tables
    (`OPEN_TABLES`) are replaced whole, not merged: ``verify: {slots: {}}`` drops the clinic's slots, and a user's
    slot table does not inherit the clinic's services. Raises InputError naming ``path`` and the key for a key
    params.yaml does not have (a typo would be silently ignored), except inside a KB's own tables (checked by
    `rag.config`), and for a value where params.yaml has a mapping (``retrieval: 5``)."""
    import difflib

    from rag.io import InputError

    open_table = any(at.startswith(t + ".") for t in OPEN_TABLES + OPEN_MAPPINGS)
    for k, v in over.items():
        name = f"{at}{k}"
        if k not in base and not open_table:
            near = difflib.get_close_matches(str(k), [str(x) for x in base], n=1)
            raise InputError(f"{path}: {name} is not a params.yaml key" + (f" (did you mean {at}{near[0]}?)" if near else ""))
        if isinstance(base.get(k), dict) and not isinstance(v, dict) and not open_table:
            raise InputError(f"{path}: {name} must be a mapping like params.yaml's, got {v!r}")
        if isinstance(v, dict) and isinstance(base.get(k), dict) and name not in OPEN_TABLES:
            _merge(base[k], v, path, name + ".")
        else:
            base[k] = v


def _with_paths(p: dict, base: Path) -> dict:
    """``p`` with the relative paths of `PATH_KEYS` and of each ``embed.encoders.*.file`` made relative to ``base``
    (the params file's folder), so the CLI works from any directory."""
    for section, key in PATH_KEYS:
        if isinstance(p.get(section), dict) and isinstance(p[section].get(key), str):
            p[section][key] = str(base / p[section][key])
    encoders = (p.get("embed") or {}).get("encoders")
    for entry in (encoders.values() if isinstance(encoders, dict) else ()):
        if isinstance(entry, dict) and isinstance(entry.get("file"), str) and entry["file"]:
            entry["file"] = str(base / entry["file"])  # embed.encoders.*.file
    return p


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _hear(path: str, p: dict, args):
    """The `rag.voice.asr.Transcript` of the audio file ``path`` with ``--asr`` or params.yaml ``speech.engine``
    (``speech`` threads, beam_size, chunk_ms, language, window_s). A missing, undecodable or empty file, or an
    engine that is not installed, raises InputError."""
    from rag.io import InputError
    from rag.voice.asr import EngineUnavailable, transcribe

    s = p["speech"]
    try:
        return transcribe(path, args.asr or s["engine"], int(s["threads"]), int(s["beam_size"]), int(s["chunk_ms"]),
                          s["language"], args.cache_dir, float(s["window_s"]))
    except (FileNotFoundError, ValueError, EngineUnavailable) as e:
        raise InputError(str(e)) from None


def _heard_fields(heard) -> dict:
    """The JSON fields of a transcribed question (empty for a typed one)."""
    if heard is None:
        return {}
    return {"asr": heard.text, "asr_engine": heard.engine, "asr_ms": heard.decode_ms, "audio_s": heard.audio_s,
            "asr_first_partial_ms": heard.first_partial_ms}


def _heard_line(heard) -> str:
    return (f"heard: {heard.text} ({heard.engine}, {heard.decode_ms:.0f} ms for {heard.audio_s:.1f} s of audio"
            + (f", first partial at {heard.first_partial_ms:.0f} ms" if heard.first_partial_ms is not None else "")
            + ")")


def _gate(args):
    from rag.voice.gate import Gate

    return None if getattr(args, "fit_gate", False) or getattr(args, "save_gate", None) else Gate.load(args.gate)


def _run(p: dict, args) -> int:
    from rag.voice.pipeline import run_chain

    if args.save_gate is not None:  # checked before the run, not after it
        _check_output_file("--save-gate", args.save_gate, "the file to write the gate to")
    result = run_chain(args.kb, args.queries, p, _gate(args), args.cache_dir, progress=True, warn=_warn)
    if args.save_gate:
        from rag.io import InputError, write_json

        try:
            write_json(args.save_gate, result["gate"]["artifact"])
        except OSError as e:
            raise InputError(f"--save-gate {args.save_gate}: {e.strerror or e}") from None
        print(f"gate written to {args.save_gate} (use it with --gate {args.save_gate})", file=sys.stderr)
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return 0
    g = result["gate"]
    print(f"KB {args.kb}: {result['kb']['passages']} passages ({'cached' if result['kb']['cached'] else 'embedded'}); "
          f"gate {g['signal']}, tau {g['tau']:.3f} ({g['source']})")
    for row in result["answers"]:
        print(f"\n[{row['id']}] {row['asr']}\n  {row['status']}: {row['say']}")
        if args.explain:
            _explain(row)
    print("\n" + _summary(result))
    return 0


EXPLAIN_CHARS = 200  # a longer query is cut in --explain's echo (what was searched is in --json in full)


def _clip(text: str, limit: int = EXPLAIN_CHARS) -> str:
    """``text``, or its first ``limit`` characters and how long it was ("… (5,012 characters)")."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def _explain(row: dict) -> None:
    verdict = ("refuse" if row["status"] == "refused" and row["reason"] == "below_tau" else
               "answer" if row["gate_score"] >= row["tau"] else "answer (the top passage holds the number it quotes)")
    print(f"  query: {_clip(row['query'])}\n  retrieved: " + ", ".join(f"{d} {s:.3f}" for d, s in row["retrieved"])
          + f"\n  gate: {row['gate_score']:.3f} vs tau {row['tau']:.3f} -> {verdict}"
          + f"\n  source: {row['source']}; reason: {row['reason']}"
          + (f"; llm error: {row['llm_error']}" if row["llm_error"] else ""))


def _summary(result: dict) -> str:
    f = result["final"]
    lines = [f"{f['n_queries']} question{'' if f['n_queries'] == 1 else 's'}: {f['n_llm']} llm, {f['n_extractive']} extractive, {f['n_refused']} refused"]
    if f["reasons"]:
        lines.append("reasons: " + ", ".join(f"{k} {v}" for k, v in f["reasons"].items()))
    if "factual_accuracy" in f:
        r = result["retrieval"]["rewritten"]
        lines.append(f"factual accuracy {f['factual_accuracy']:.3f}, grounded wrong said {f['grounded_wrong_said']}, "
                     f"unsupported said {f['unsupported_said']}, refusal precision {f['refusal_precision']:.3f} / "
                     f"recall {f['refusal_recall']:.3f}, answerable refused {f['answerable_refused']}; "
                     f"recall@1 {r['recall_at_1']:.3f}, recall@3 {r['recall_at_3']:.3f}")
    return "\n".join(lines)


def _compare() -> int:
    found = [t for t in COMPARE_TABLES if (ROOT / t).is_file()]
    for t in found:
        print(f"== {t}\n{(ROOT / t).read_text(encoding='utf-8')}")
    if not found:
        print(f"error: none of {', '.join(COMPARE_TABLES)} exists under {ROOT} (run make repro there)", file=sys.stderr)
        return 2
    return 0


def _ko_passages(p: dict, kb: str | None) -> list[dict]:
    """The passages (``_id``, ``title``, ``text``) a Korean question is answered from: the paragraphs of the KB
    folder ``kb`` (title = the nearest heading, `rag.retrieval.chunk.chunk_folder`), or KorQuAD's passages in
    ``ko.data_dir`` when ``kb`` is None. Raises InputError as those readers do, and naming both ways when KorQuAD's
    passages were never prepared."""
    from rag.io import InputError, read_jsonl

    if kb is None:
        path = Path(p["ko"]["data_dir"]) / "passages.jsonl"
        if not path.is_file():
            raise InputError(f"{path}: KorQuAD passages not prepared (`make repro` prepares them from the public data "
                             "named in the README's first paragraph), or answer from your own folder with --kb FOLDER")
        return read_jsonl(path, required=["_id", "title", "text"])
    from rag.retrieval.chunk import chunk_folder
    from rag.voice import quarantine

    return [{"_id": x.id, "title": x.heading, "text": x.text} for x in chunk_folder(kb, quarantine.allowed(p))]


def _ask_ko(question: str, p: dict, args) -> int:
    """One Korean question: BM25 over Kiwi morphemes on `_ko_passages`, the top ``ko_gen.cli_top_k`` shown to the LLM
    (`rag.ko.answer.answer_ko`); the reply, its citations and the evidence printed (``--json``: as one object)."""
    from rag.config import number
    from rag.ko import tokenize as korean
    from rag.ko.answer import KoSettings, answer_ko, focus, headed
    from rag.ko.support import from_params as support_from_params
    from rag.voice.pipeline import llm_url
    from rag.retrieval.indexes import BM25Index
    from rag.bench.squad import passage_text

    ko, g = p["ko"], p["ko_gen"]
    for key, kind, bounds in (("cli_top_k", int, {"at_least": 1}), ("passage_max_chars", int, {"at_least": 2}),
                              ("max_len", int, {"at_least": 1}), ("bm25_k1", float, {"at_least": 0}),
                              ("min_question_share", float, {"at_least": 0, "at_most": 1})):
        number(p, "ko_gen", key, kind, **bounds)
    number(p, "ko", "bm25_b", at_least=0, at_most=1)
    passages = _ko_passages(p, args.kb)
    texts = [passage_text(x, ko["index_title"]) for x in passages]
    tokens = dict(zip(texts, korean.kiwi_tokens_batch(texts)))
    index = BM25Index(texts, lambda t: tokens[t] if t in tokens else korean.kiwi_tokens(t),
                      k1=float(g["bm25_k1"]), b=float(ko["bm25_b"]))
    top = index.top_k(question, int(g["cli_top_k"]))
    # a folder's passages are read with their heading ("서울 지점" vs "부산 지점"); KorQuAD's titles are article names
    shown = [focus(question, headed(passages[i]["title"], passages[i]["text"]) if args.kb else passages[i]["text"],
                   int(g["passage_max_chars"])) for i, _ in top]
    llm = p["llm"]
    s = KoSettings.from_params(g, llm, g["cli_prompt"], support_from_params(g, [tokens[t] for t in texts], ROOT))
    with llm_url({"llm": {**llm, "n_ctx": int(g["n_ctx"]), "threads": int(g["threads"]), "n_parallel": 1}}, _warn) as url:
        res = answer_ko(url, question, shown, s)
    final = res["final"]
    if args.json:
        print(json.dumps({"question": question, "kb": args.kb, **final, "llm_raw": res["raw"], "llm_error": res["error"],
                          "retrieved": [{"n": n, "id": passages[i]["_id"], "title": passages[i]["title"],
                                         "bm25": score, "shown": shown[n - 1]} for n, (i, score) in enumerate(top, 1)]},
                         indent=2, ensure_ascii=False))
        return 0
    print(f"답변: {final['say']}")
    print(f"인용: {', '.join(c if c == 'none' else f'[문서 {c}]' for c in final['citations'])}")
    print(f"상태: {final['status']} ({final['reason']}); LLM raw: {res['raw']!r}")
    for n, (i, score) in enumerate(top, 1):
        print(f"\n[문서 {n}] {passages[i]['_id']} {passages[i]['title']} (BM25 {score:.2f})\n{shown[n - 1]}")
    return 0


def _voice_kb(p: dict, args):
    """``(gate, KB)`` for a voice-track command: params and the shipped gate checked, the KB from the cache."""
    from rag import config
    from rag.voice import quarantine
    from rag.retrieval.kb_cache import open_kb
    from rag.voice.pipeline import check_gate

    gate = _gate(args)
    config.check(p)
    check_gate(gate, p)
    return gate, open_kb(args.kb, config.hybrid_config(p), args.cache_dir, progress=True,
                         allow_instructions=quarantine.allowed(p), warn=_warn, store=config.kb_store(p))


@contextlib.contextmanager
def _llm_ready(p: dict):
    """``(url, answering)`` of the LLM (`rag.voice.pipeline.llm_url`; ``answering``: whether it answers there, as
    `llm_url` found when it checked, `rag.llm.client.reachable`: not asked twice) with the turn's answer scorers
    already loaded (`rag.voice.pipeline.answer_models`, the judge of LLM answers only when one answers), so that their loading is not inside a turn's deadline. The
    judge's e5 encoder (~2 s) loads while the packaged server starts (~2 s), side by side; a server that does not
    start leaves the judge loaded for nothing."""
    from concurrent.futures import ThreadPoolExecutor

    from rag.voice.pipeline import answer_models, llm_url

    local, warned = not p["llm"]["url"], []

    def warn(message: str) -> None:  # llm_url warns when the server did not start or the URL does not answer
        warned.append(message)
        _warn(message)

    with ThreadPoolExecutor(1) as pool:
        loading = pool.submit(answer_models, p, True) if local else None
        with llm_url(p, warn) as url:
            answering = url is not None and not warned
            if loading is not None:
                loading.result()  # its errors (a missing encoder file) are raised here
            else:
                answer_models(p, answering)
            yield url, answering


def _memory(p: dict, args, warn=_warn):
    """The memory stores of ``p["memory"]`` (environment overrides applied, `rag.memory.open_memory`); ``--session``
    checked first (`rag.memory.store.session_problem`). Raises InputError for a bad session id or a bad store URL
    (naming where the URL came from, never its password)."""
    from rag.io import InputError
    from rag.memory import open_memory
    from rag.memory.store import session_problem

    why = session_problem(args.session) if args.session is not None else None
    if why:
        raise InputError(why)
    from rag.config import number

    m = p["memory"]
    ttl_min, retention_days = number(p, "memory", "ttl_min"), number(p, "memory", "retention_days")
    try:
        return open_memory(m["url"], m["archive_url"], ttl_min, retention_days, args.cache_dir, warn=warn)
    except ValueError as e:
        given = [f"${v}" for v in ("RAG_MEMORY_URL", "RAG_MEMORY_ARCHIVE_URL") if os.environ.get(v)]
        raise InputError(f"{' or '.join(given) or args.params + ' memory.url / memory.archive_url'}: {e}") from None


def _ask_voice(question: str, p: dict, args, heard=None) -> int:
    """One question (typed, or ``heard``: the `rag.voice.asr.Transcript` of ``--wav``) through the voice turn
    (`rag.voice.pipeline.answer_question`, or `answer_turn` in a ``--session``) on ``--kb`` with the shipped gate;
    the KB comes from the cache when it was embedded before. ``--say``: the reply spoken into that WAV."""
    from rag.voice.pipeline import answer_question, answer_turn, follow_up_resolver

    from rag.memory.store import clean_text

    question = clean_text(question)  # undecodable argv bytes: U+FFFD, so the output is valid UTF-8
    memory = _memory(p, args) if args.session is not None else None  # a bad --session exits 2 before any work
    gate, kb = _voice_kb(p, args)
    with _llm_ready(p) as (url, answering):
        url = url if answering else None  # down: each answer says llm_unreachable without asking
        if memory is not None:
            final, row, res = answer_turn(question, args.session, memory, p, gate, url, kb,
                                          follow_up_resolver(kb, p), args.caller)
            memory.close()
        else:
            (final, row), res = answer_question(question, p, gate, url, kb, args.context), None
    out = {"question": question, "context": args.context, "session": args.session,
           "resolved_as": res.kind if res else None, "query": row["query"] if row else res.query,
           "retrieved": [[d, s] for d, s in zip(row["retrieved"], row["retrieved_scores"])] if row else [],
           "gate_score": row["score"] if row else None, "tau": gate.tau, "signal": gate.signal,
           "kb_cached": kb.cached, "status": final["status"], "reason": final["reason"], "say": final["say"],
           "source": final["source"], "llm_error": row["error"] if row else None,
           "memory": (row or {}).get("memory", 0), **_heard_fields(heard)}
    if args.say:
        from rag.voice.tts import speak

        try:
            spoken = speak(out["say"], args.say)
        except OSError as e:   # a folder it may not write (/proc): nothing was written, the answer not yet shown
            from rag.io import InputError

            raise InputError(f"--say {args.say}: {e.strerror or e}") from None
        out.update(say_wav=str(spoken.path), say_audio_s=spoken.audio_s, tts_ms=spoken.synth_ms,
                   tts_first_audio_ms=spoken.first_audio_ms)
    if args.json:
        print(json.dumps(out, indent=2, ensure_ascii=False))
        return 0
    if heard:
        print(_heard_line(heard))
    print(f"answer: {out['say']}\nsource: {out['source']}\nstatus: {out['status']} ({out['reason']})")
    if args.say:
        print(f"said to: {out['say_wav']} ({out['say_audio_s']:.1f} s of audio, synthesised in {out['tts_ms']:.0f} ms)")
    if args.explain:
        if res:
            print(f"  resolved as {res.kind}" + (f" (leaning on {res.antecedent!r})" if res.antecedent else "")
                  + (f"; the LLM saw {out['memory']} earlier turn(s) as [memory n]" if out["memory"] else ""))
        if row:
            _explain(out)
            for doc in row["retrieved"]:
                print(f"\n[{doc}]\n{kb.docs[doc]}")
    return 0


def _chat(p: dict, args) -> int:
    """A call on stdin: one question per line until an empty line or end of input (`rag.voice.pipeline.answer_turn`)."""
    import uuid

    from rag.io import normalise_text
    from rag.memory.store import clean_text
    from rag.voice.pipeline import answer_turn, end_call, follow_up_resolver, preference_ask

    memory = _memory(p, args)  # a bad --session exits 2 before any work
    session = args.session if args.session is not None else uuid.uuid4().hex[:12]
    gate, kb = _voice_kb(p, args)
    resolver = follow_up_resolver(kb, p)
    if hasattr(sys.stdin, "reconfigure"):  # bytes that are not UTF-8 become U+FFFD instead of ending the call
        sys.stdin.reconfigure(errors="replace")
    interactive = sys.stdin.isatty()
    print(f"session {session} (memory: {memory.short.name if memory.short else 'none'}); one question per line, "
          "an empty line ends the call", file=sys.stderr)
    code = 0
    try:
        with _llm_ready(p) as (url, _):
            while True:
                if interactive:
                    print("> ", end="", file=sys.stderr, flush=True)
                line = sys.stdin.readline()
                if not line.strip():
                    break
                heard = _hear(line.strip(), p, args) if args.wav_lines else None
                question = clean_text(heard.text if heard else normalise_text(line)).strip()
                if not question:  # audio in which the recogniser heard nothing: say so, the call goes on
                    _warn(f"{line.strip()}: the recogniser heard nothing")
                    continue
                final, row, res = answer_turn(question, session, memory, p, gate, url, kb, resolver, args.caller)
                out = {"session": session, "question": question, "resolved_as": res.kind, "query": res.query,
                       "status": final["status"], "reason": final["reason"], "say": final["say"],
                       "source": final["source"], "memory": (row or {}).get("memory", 0), **_heard_fields(heard)}
                if args.json:
                    print(json.dumps(out, ensure_ascii=False), flush=True)
                    continue
                if heard:
                    print(_heard_line(heard))
                elif not interactive:
                    print(f"caller: {question}")
                print(f"agent: {final['say']}  [{final['status']}: {final['source']}]", flush=True)
                if args.explain:
                    print(f"  resolved as {res.kind}: {_clip(res.query)!r}; reason {final['reason']}"
                          + (f"; gate {row['score']:.3f} vs tau {gate.tau:.3f}; retrieved {', '.join(row['retrieved'])}"
                             if row else "")
                          + (f"; the LLM saw {row['memory']} earlier turn(s) as [memory n]" if row and row.get("memory")
                             else ""))
            if args.caller:  # what the caller told us about themselves, for their next call (an empty id: none)
                kept, why = end_call(session, args.caller, memory, p, preference_ask(url, p))
                print("remembered for the caller's next call: "
                      + (", ".join(f"{k} = {v}" for k, v in kept.items()) or "nothing") + (f" ({why})" if why else ""),
                      file=sys.stderr)
    except KeyboardInterrupt:  # Ctrl-C hangs up: the call ends as at an empty line, its recorded turns kept
        print(file=sys.stderr)
        code = 130
    memory.close()
    print(f"session {session} ended; `rag forget --session {session}` deletes it", file=sys.stderr)
    return code


def _index(p: dict, args) -> int:
    """Load ``--kb`` into the pgvector store; exit 1 naming the store when it cannot be reached."""
    from rag import config
    from rag.voice import quarantine
    from rag.io import InputError
    from rag.retrieval.kb_cache import load_into_store, open_kb

    store = args.store or config.kb_store(p)
    if not config.is_postgres_url(store):
        raise InputError(f"--store must be a postgresql:// URL (or set retrieval.store / $RAG_KB_STORE), got "
                         f"{config.redact_url(store)}")
    kb = open_kb(args.kb, config.hybrid_config(p), args.cache_dir, progress=True,
                 allow_instructions=quarantine.allowed(p), warn=_warn)
    try:
        n = load_into_store(kb, store)
    except (ConnectionError, LookupError) as e:  # down, or a store in the old one-graph layout
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"KB {args.kb}: {n} passages loaded (key {kb.key[:12]}); ask / run / chat use it with "
          "RAG_KB_STORE set to the same URL")
    return 0


def _forget(p: dict, args) -> int:
    """Delete a session from every memory store; exit 1 naming a store that could not be reached."""
    from rag.memory import MemoryUnavailable

    memory = _memory(p, args, warn=None)  # a store that could not be opened is the error below, said once
    try:
        deleted = memory.forget(args.session)
        if memory.degraded:  # a store down at start still holds the call
            raise MemoryUnavailable(f"session not forgotten everywhere: {memory.degraded} (deleted: {deleted})")
    except MemoryUnavailable as e:
        print(f"error: {e} (the reachable stores were cleared; run forget again when it is back)", file=sys.stderr)
        return 1
    finally:
        memory.close()
    print(f"session {args.session}: deleted " + ", ".join(f"{n} turns from {store}" for store, n in deleted.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
