"""What every stage shares: reading params.yaml and the voice-track inputs."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
# Import this checkout's rag/, not the one the editable install points at: `dvc exp run --temp` and queued
# experiments run the stages in a copy of the repository (a stage importing the workspace's rag/ would run
# code the experiment never committed).
sys.path.insert(0, str(ROOT))
VOICE_DATA = ROOT / "data" / "voice"
VOICE_METRICS = ROOT / "metrics" / "voice"
GATE_PATH = ROOT / "models" / "gate.json"  # written by the threshold stage, shipped


def gate_scores(per_query: list[dict]):
    """``(gate, {query_id: score})``: the shipped gate (models/gate.json) applied to per_query.jsonl's signals."""
    from rag.voice.gate import Gate

    gate = Gate.load(GATE_PATH)
    return gate, gate.scores({r["id"]: r["signals"] for r in per_query})


def without_deadline(p: dict) -> dict:
    """``p`` with ``answer.deadline_s`` 0: a stage that measures what is said lets each LLM call run to its own cap
    (``llm.timeout_s``) instead of the turn's wall-clock budget, so its numbers do not move with the machine's load
    (session 51: beside a test run, SmolLM2 hit the 3 s deadline 12 times and final.json changed). The deadline is
    measured where it matters, by the timing stages (load, bench_latency, bench_cli); ``latency.json`` counts the
    replies slower than it (`rag.voice.pipeline.latency_metrics`)."""
    return {**p, "answer": {**p["answer"], "deadline_s": 0}}


def tables_off(p: dict) -> dict:
    """``p`` without the clinic's hand-written tables (``verify.slots``, ``verify.answer_types``): what a new KB
    has (the held-out vet KB is always run this way)."""
    return {**p, "verify": {**p["verify"], "slots": {}, "answer_types": {}}}


def parser() -> argparse.ArgumentParser:
    """The command line every stage takes: ``--params PATH`` (default params.yaml), and ``--help`` printing the
    running stage's docstring (what it reads, writes and how long it takes)."""
    ap = argparse.ArgumentParser(description=getattr(sys.modules["__main__"], "__doc__", None),
                                 formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    ap.add_argument("--params", default=str(ROOT / "params.yaml"), help="params file (default: %(default)s)")
    return ap


_ARGS: argparse.Namespace | None = None  # the command line `main` parsed


def args() -> argparse.Namespace:
    """The stage's parsed command line (`main` parses it strictly before the stage runs); outside `main`, the
    defaults."""
    return _ARGS if _ARGS is not None else parser().parse_args([])


def params_error(message: str):
    """An InputError naming the params file this stage read (``--params``, default params.yaml)."""
    from rag.io import InputError

    return InputError(f"{args().params}: {message}")


def variant_option(default: str):
    """The ``options`` of a stage whose recipe has variants (`main`): ``--variant SECTION``, a params section whose
    keys override ``default``'s (`variant_section`)."""
    return lambda ap: ap.add_argument("--variant", default=default, metavar="SECTION",
                                      help=f"params section whose keys override {default}'s (default: {default} itself)")


def variant_section(p: dict, default: str) -> tuple[str, dict]:
    """``(name, settings)``: the section ``--variant`` names and ``default``'s keys with its keys over them.
    InputError naming the params file when no such section exists."""
    name = args().variant
    if name not in p:
        raise params_error(f"no section {name!r} (--variant names a params section)")
    return name, {**p[default], **p[name]}


def params() -> dict:
    """params.yaml (or the file given as ``--params PATH`` on the stage's command line), checked
    (`rag.config.check`): a bad value raises InputError naming the file and key before a stage does any work. Makes
    ``embed.model`` the process-wide encoder (`rag.retrieval.embed.use_encoder`)."""
    from rag import config
    from rag.io import InputError, read_params

    from rag.retrieval.embed import use_encoder

    path = Path(args().params)
    p = read_params(path)
    try:
        config.check(p)
        check_paths(p)
        use_encoder(config.encoder(p, ROOT))
    except KeyError as e:
        raise InputError(f"{path}: missing key {e}") from None
    except (ValueError, TypeError) as e:
        raise InputError(f"{path}: bad value ({e})") from None
    return p


# params that name a file or folder (relative to the checkout); "*": every value of that mapping
PATH_PARAMS = ("voice.kb", "voice.queries", "speech.latency_questions", "select.pairs", "select.clinic_dialogues",
               "select.dental.kb", "select.dental.queries", "select.salon.kb", "select.salon.queries",
               "select.near_miss.*", "abstain.transfer_kb", "abstain.transfer_queries.*", "data.dest_dir",
               "ko.squad_path", "ko.data_dir", "ko.metrics_dir", "heysquad.dir", "heysquad.data_dir",
               "heysquad.metrics_dir", "ko_gen.support_model", "finetune.model", "finetune.metrics_dir",
               "finetune_e5.model", "finetune_e5_q8.model", "finetune_e5_sentences.model", "ko_finetune.base_model",
               "ko_finetune.model", "finetune_e5_l6.model", "finetune_e5_l6_distilled.teacher",
               "finetune_e5_l6_distilled.model", "finetune_e5_l6_query.teacher", "finetune_e5_l6_query.model",
               "finetune_score_distill.teacher", "finetune_score_distill.model", "finetune_score_distill_spoken.model", "select.e5_model",
               "data.shared_dir")


def check_paths(p: dict) -> None:
    """ValueError naming the key unless every `PATH_PARAMS` value is a non-empty string (``voice.kb: ''`` read the
    checkout itself as the KB, README.md included; ``null`` was a TypeError deep in a stage). A key that is absent
    is a KeyError as for any other."""
    for key in PATH_PARAMS:
        *parents, last = key.split(".")
        node = p
        for k in parents:
            node = node[k]
        items = node.items() if last == "*" else [(last, node[last])]
        for name, value in items:
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{'.'.join(parents + [name])} must be a path (a non-empty string), got {value!r}")


def check_weight_grid(value, key: str) -> None:
    """InputError naming the params file and ``key`` unless ``value`` lists fusion weights
    (`rag.retrieval.indexes.fusion_weights`): a stage checks its grid before any work."""
    from rag.retrieval.indexes import fusion_weights

    try:
        fusion_weights(value, key)
    except ValueError as e:
        raise params_error(str(e)) from None


def voice_index(p: dict):
    """The clinic passages of chunks.jsonl with their embed.npy rows (and, with ``retrieval.index: hnsw``, the HNSW
    graph the ann_index stage saved)."""
    import numpy as np

    from rag import config
    from rag.retrieval.chunk import Passage
    from rag.retrieval.indexes import HNSWIndex
    from rag.io import read_jsonl
    from rag.retrieval.search import PassageIndex

    passages = [Passage(r["id"], r["doc"], r["text"], r["heading"])
                for r in read_jsonl(VOICE_DATA / "chunks.jsonl", required=("id", "doc", "text", "heading"))]
    hc = config.hybrid_config(p)
    dense = HNSWIndex.load(VOICE_DATA / "hnsw.faiss", hc.hnsw[2]) if hc.index == "hnsw" else None
    return PassageIndex(passages, np.load(VOICE_DATA / "embed.npy"), hc, dense)


def heysquad_index(p: dict, *query_fields: str):
    """``(passages, queries, index)`` of the prepared HeySQuAD files (``heysquad.data_dir``): passages.jsonl
    rows, queries.jsonl rows (each must hold ``id``, ``relevant``, the three question texts and
    ``query_fields``) and a PassageIndex over the passages with embed.npy and ``p``'s hybrid config."""
    import numpy as np

    from rag import config
    from rag.bench.heysquad import SOURCES, as_passages
    from rag.io import read_jsonl
    from rag.retrieval.search import PassageIndex

    data = ROOT / p["heysquad"]["data_dir"]
    passages = read_jsonl(data / "passages.jsonl", required=("_id", "text"))
    queries = read_jsonl(data / "queries.jsonl", required=("id", "relevant", *SOURCES, *query_fields))
    return passages, queries, PassageIndex(as_passages(passages), np.load(data / "embed.npy"), config.hybrid_config(p))


def answer_scorer(p: dict, design: str | None = None, key: str = "select.design"):
    """The shipped answer-selection model of ``design`` (default ``select.design``), from ``select.model_dir`` at
    ``select.min_score`` (`rag.config.answer_scorer`); None for ``rules``. A bad design or min_score
    raises InputError naming the params file and the key; a model fitted on another e5 encoder than
    ``select.e5_model``, InputError naming the model file."""
    from rag import config

    try:
        return config.answer_scorer(p, design, key, ROOT)
    except ValueError as e:
        raise params_error(str(e)) from None


def answer_judge(p: dict):
    """The shipped scorer of ``select.judge`` (`answer_scorer`): it checks LLM answers under the rules pick."""
    return answer_scorer(p, p["select"]["judge"], "select.judge")


def main(fn, options=None, argv: list[str] | None = None) -> None:
    """Run a stage. Its command line (``argv``, default sys.argv[1:]) is parsed first, strictly: ``--params``, the
    stage's own ``options`` (a function adding arguments to the `parser`; read them with `args`) and ``--help``;
    an unknown, misspelt or abbreviated argument exits 2 with the usage before any work (``--redecid`` must not
    run a 90-minute LLM grid and overwrite its metrics). An input error, or a file that cannot be read or written (a
    wrong path in params.yaml), prints one line naming the file (and line) and exits 1."""
    import signal

    from rag.voice.gate import ThresholdError
    from rag.io import InputError

    global _ARGS
    ap = parser()
    if options is not None:
        options(ap)
    _ARGS = ap.parse_args(argv)
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: a started LLM server is stopped
    try:
        fn()
    except (InputError, ThresholdError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    except OSError as e:
        if e.filename is None:  # not about a file (a socket, the system): the traceback is the useful part
            raise
        print(f"error: {e.filename}: {e.strerror or e}", file=sys.stderr)
        sys.exit(1)
    finally:   # the caller's handler back (rag.__main__.main does the same: forked workers must not inherit this one)
        signal.signal(signal.SIGTERM, previous)


def committed(p, key: str, train_json: str) -> tuple[Path, dict]:
    """Path of the encoder ``p[key]["model"]`` and the ``shipped`` record (path, sha256, seed) that ``train_json``
    (in ``finetune.metrics_dir``) holds for it; InputError if the encoder is missing or its sha256 differs."""
    import json

    from rag.io import InputError, sha256_of

    f = p[key]
    record = json.loads((ROOT / p["finetune"]["metrics_dir"] / train_json).read_text(encoding="utf-8"))["shipped"]
    path = ROOT / f["model"]
    if not path.exists():
        raise InputError(f"{f['model']}: missing (stage {key} writes it; it is committed in git)")
    if sha256_of(path) != record["sha256"]:
        raise InputError(f"{f['model']}: sha256 differs from {p['finetune']['metrics_dir']}/{train_json} shipped.sha256")
    return path, record
