"""Command line: ``python -m rag run KB_FOLDER QUERIES.jsonl [--params params.yaml]``.

Runs evaluate -> threshold -> answer -> final (the same code as the DVC stages) on any KB
folder of Markdown files and queries file, and prints the metrics as JSON. Bad input exits 2
with one line naming the file and line.

``python -m rag ask "질문" [--track ko|voice]``: answer one question (track detected by Hangul
characters when not given) and print the answer, its citations and the retrieved passages.
Korean: BM25 over Kiwi morphemes on ``ko.data_dir``/passages.jsonl, prompt ``ko_gen.cli_prompt``,
``ko_gen.cli_top_k`` passages, `rag.ko_answer`. Voice: the clinic KB (fixtures/voice/kb, indexed with
params' hybrid config), the gate of ``abstain.signal`` with tau from metrics/voice/threshold.json
(0 if absent), `rag.answer`.
``python -m rag compare``: print the retrieval compare tables (metrics/ko/retrieval.md,
metrics/voice/compare.md) that exist.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
from pathlib import Path

_HANGUL = re.compile(r"[\uac00-\ud7a3\u1100-\u11ff\u3130-\u318f]")
COMPARE_TABLES = ("metrics/ko/retrieval.md", "metrics/voice/compare.md")


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(prog="rag", description=(
        "Grounded answers to speech-recogniser transcripts from a knowledge base: run the voice chain on a KB and "
        "a queries file (run), answer one question (ask), print the retrieval compare tables (compare)."))
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the voice chain on a KB folder and a queries file")
    run.add_argument("kb", help="folder of *.md files (# Title, paragraphs separated by blank lines)")
    run.add_argument("queries", help="queries.jsonl (id, asr, context, relevant, answerable, facts)")
    run.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    run.add_argument("--llm-url", help="use this OpenAI-compatible server instead of starting one")
    run.add_argument("--answers", action="store_true", help="also print what is said for each query")
    ask_p = sub.add_parser("ask", help="answer one question (Korean or English) and show the evidence")
    ask_p.add_argument("question")
    ask_p.add_argument("--track", choices=("ko", "voice"), help="default: ko if the question has Hangul")
    ask_p.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    ask_p.add_argument("--llm-url", help="use this OpenAI-compatible server instead of starting one")
    sub.add_parser("compare", help="print the retrieval compare tables")
    args = parser.parse_args(argv)
    if args.command == "compare":
        return _compare()

    from rag.gate import ThresholdError
    from rag.io import InputError, normalise_text, read_params
    from rag.pipeline import run_chain

    # SIGTERM unwinds like Ctrl-C, so a started LLM server is stopped in its `finally`.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        p = read_params(args.params)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        if args.llm_url:
            p["llm"]["url"] = args.llm_url
        if args.command == "ask":
            question = normalise_text(args.question)  # as KB text is: NFKC, NFC when it holds Hangul
            if not question.strip():
                raise InputError("the question is empty")
            track = args.track or ("ko" if _HANGUL.search(question) else "voice")
            return _ask_ko(question, p) if track == "ko" else _ask_voice(question, p)
        result = run_chain(args.kb, args.queries, p)
    except (InputError, ThresholdError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyError as e:
        print(f"error: {args.params}: missing key {e}", file=sys.stderr)
        return 2
    except (ValueError, TypeError) as e:
        print(f"error: {args.params}: bad value ({e})", file=sys.stderr)
        return 2
    if not args.answers:
        result.pop("answers")
    print(json.dumps(result, indent=2, ensure_ascii=False))
    return 0


def _compare() -> int:
    found = [Path(t) for t in COMPARE_TABLES if Path(t).is_file()]
    for t in found:
        print(f"== {t}\n{t.read_text(encoding='utf-8')}")
    if not found:
        print(f"error: none of {', '.join(COMPARE_TABLES)} exists (run dvc repro)", file=sys.stderr)
        return 2
    return 0


def _ask_ko(question: str, p: dict) -> int:
    from rag import korean
    from rag.io import read_jsonl
    from rag.ko_answer import KoSettings, answer_ko, focus
    from rag.pipeline import llm_url
    from rag.retrieval import BM25Index
    from rag.squad import passage_text

    ko, g = p["ko"], p["ko_gen"]
    passages = read_jsonl(Path(ko["data_dir"]) / "passages.jsonl", required=["_id", "title", "text"])
    index = BM25Index([passage_text(x, ko["index_title"]) for x in passages], korean.kiwi_tokens,
                      k1=float(g["bm25_k1"]), b=float(ko["bm25_b"]))
    top = index.top_k(question, int(g["cli_top_k"]))
    shown = [focus(question, passages[i]["text"], int(g["passage_max_chars"])) for i, _ in top]
    llm = p["llm"]
    s = KoSettings(prompt=g["cli_prompt"], max_len=int(g["max_len"]), max_tokens=int(g["max_tokens"]),
                   timeout_s=float(g["timeout_s"]), temperature=float(llm["temperature"]), seed=int(llm["seed"]),
                   model=llm.get("model") or None, min_shared=int(g["min_shared"]))
    with llm_url({"llm": {**llm, "n_ctx": int(g["n_ctx"]), "threads": int(g["threads"])}}) as url:
        res = answer_ko(url, question, shown, s)
    final = res["final"]
    print(f"답변: {final['say']}")
    print(f"인용: {', '.join(c if c == 'none' else f'[문서 {c}]' for c in final['citations'])}")
    print(f"상태: {final['status']} ({final['reason']}); LLM raw: {res['raw']!r}")
    for n, (i, score) in enumerate(top, 1):
        print(f"\n[문서 {n}] {passages[i]['_id']} {passages[i]['title']} (BM25 {score:.2f})\n{shown[n - 1]}")
    return 0


def _ask_voice(question: str, p: dict) -> int:
    """The voice answer path for one typed question (`rag.pipeline.answer_question` on the clinic KB, tau from
    metrics/voice/threshold.json), printed."""
    from rag.pipeline import answer_question, llm_url

    tau_file = Path("metrics/voice/threshold.json")
    if not tau_file.is_file():
        from rag.io import InputError

        raise InputError(f"{tau_file}: not found; the voice gate needs tau (run dvc repro from the repo root)")
    tau = json.loads(tau_file.read_text(encoding="utf-8"))["tau"]
    with llm_url(p) as url:
        final, row, score, kb = answer_question(question, p, tau, url)
    signal = p["abstain"]["signal"]
    print(f"answer: {final['say']}")
    print(f"source: {final['source']}")
    print(f"status: {final['status']} ({final['reason']}); gate {signal} {score:.3f}, tau {tau:.3f}")
    for doc in row["retrieved"]:
        print(f"\n[{doc}]\n{kb[doc]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
