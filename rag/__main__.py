"""Command line: ``python -m rag run KB_FOLDER QUERIES.jsonl [--params params.yaml]``.

Runs evaluate -> threshold -> answer -> final (the same code as the DVC stages) on any KB
folder of Markdown files and queries file, and prints the metrics as JSON. Bad input exits 2
with one line naming the file and line.
"""
from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = argparse.ArgumentParser(prog="rag", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the voice chain on a KB folder and a queries file")
    run.add_argument("kb", help="folder of *.md files (# Title, paragraphs separated by blank lines)")
    run.add_argument("queries", help="queries.jsonl (id, asr, context, relevant, answerable, facts)")
    run.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    run.add_argument("--llm-url", help="use this OpenAI-compatible server instead of starting one")
    run.add_argument("--answers", action="store_true", help="also print what is said for each query")
    args = parser.parse_args(argv)

    import yaml

    from rag.gate import ThresholdError
    from rag.io import InputError
    from rag.pipeline import run_chain

    try:
        with open(args.params, encoding="utf-8") as f:
            p = yaml.safe_load(f)
    except OSError as e:
        print(f"error: {args.params}: {e.strerror}", file=sys.stderr)
        return 2
    if args.llm_url:
        p["llm"]["url"] = args.llm_url
    try:
        result = run_chain(args.kb, args.queries, p)
    except (InputError, ThresholdError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not args.answers:
        result.pop("answers")
    print(json.dumps(result, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
