"""A knowledge-base folder made searchable once: chunked, embedded and split into sentences, cached on disk by
content hash, so the next `rag ask` / `rag run` on the same folder loads it instead of embedding it again.

The key is the sha256 of the ``*.md`` files (names and bytes), the embedder (`rag.retrieval.embed.embedder_id`) and the
code that turns text into passages and sentences, so an edited file or a changed splitter never reads a stale
entry. BM25 is not cached: it depends on the retrieval settings and builds in milliseconds.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from rag.retrieval.chunk import Passage, chunk_folder, kb_files, load_kb, quarantine_report
from rag.io import InputError, read_jsonl, write_jsonl
from rag.retrieval.search import HybridConfig, PassageIndex
from rag.retrieval.sentences import SentenceIndex

_CODE = ("retrieval/chunk.py", "voice/quarantine.py", "io.py", "voice/verify.py", "retrieval/sentences.py",
         "retrieval/embed.py", "retrieval/kb_cache.py")  # text -> passages, sentences


@dataclass
class KnowledgeBase:
    """index: the passages and their (n, 384) unit vectors; docs: ``{doc: full text}`` (`rag.retrieval.chunk.load_kb`);
    sentences: the KB's `SentenceIndex`; key: the cache key; cached: True when read from the cache;
    quarantined: the instruction-like paragraphs (`rag.retrieval.chunk.quarantine_report` rows), left out of the index,
    docs and sentences unless the KB was opened with ``allow_instructions``."""

    index: PassageIndex
    docs: dict[str, str]
    sentences: SentenceIndex
    key: str
    cached: bool
    quarantined: list[dict] = field(default_factory=list)


def default_cache_dir() -> Path:
    """``$RAG_CACHE_DIR``, else ``$XDG_CACHE_HOME/voice-rag``, else ``~/.cache/voice-rag``."""
    if os.environ.get("RAG_CACHE_DIR"):
        return Path(os.environ["RAG_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "voice-rag"


def fingerprint(folder: str | Path, allow_instructions: bool = False) -> str:
    """sha256 (hex) of the folder's ``*.md`` names and bytes, the embedder id, the text-processing code and
    ``allow_instructions``. Raises InputError when the folder is missing or holds no .md file, or a file cannot be
    read."""
    from rag.retrieval.embed import embedder_id

    files = kb_files(folder)
    h = hashlib.sha256(embedder_id().encode() + (b"\0allow_instructions" if allow_instructions else b""))
    here = Path(__file__).resolve().parent.parent  # rag/
    for name in _CODE:
        h.update((here / name).read_bytes())
    for f in files:
        try:
            data = f.read_bytes()
        except OSError as e:  # no permission, an I/O error (/proc/self/mem behind a link)
            raise InputError(f"{f}: cannot read ({e.strerror or e})") from None
        h.update(f.name.encode() + b"\0" + hashlib.sha256(data).digest())
    return h.hexdigest()


def open_kb(folder: str | Path, config: HybridConfig = HybridConfig(), cache_dir: str | Path | None = None,
            progress: bool = False, allow_instructions: bool = False,
            warn: Callable[[str], None] | None = None, store: str = "") -> KnowledgeBase:
    """The KB of ``folder`` from ``cache_dir`` (default `default_cache_dir`) when an entry with its
    `fingerprint` exists, else built (chunked, embedded with a progress bar when ``progress``) and stored there
    (written to a temporary folder, then renamed: a crash never leaves a half entry). A cache folder that cannot
    be written only costs the saving. Raises InputError for a bad KB (`rag.retrieval.chunk.chunk_folder`).
    Instruction-like paragraphs are quarantined (`rag.retrieval.chunk`) unless ``allow_instructions``; ``warn`` is told
    one line per such paragraph (file:line, paragraph number, cue), cached or not. ``store``: a PostgreSQL URL
    the KB was loaded into (`load_into_store`): its dense ranking then comes from pgvector
    (`rag.retrieval.pgvector`; ConnectionError / LookupError when the store is down or lacks this KB)."""
    kb = _open(folder, config, cache_dir, progress, allow_instructions)
    if store:
        from rag.retrieval.pgvector import PgVectorStore

        kb.index.dense = PgVectorStore(store).dense(kb.key, config.hnsw[2])
    if warn:
        what = "kept (allow_instructions)" if allow_instructions else "quarantined (not indexed, never said)"
        for r in kb.quarantined:
            where = f"paragraph {r['paragraph']}" if r["paragraph"] is not None else "heading block"
            warn(f"{r['file']}:{r['line']}: {where} {what}: instruction-like ({r['cue']}): {r['text'][:80]!r}")
    return kb


def _open(folder, config, cache_dir, progress, allow_instructions) -> KnowledgeBase:
    from rag.retrieval.embed import passage_embedder

    key = fingerprint(folder, allow_instructions)
    entry = Path(cache_dir or default_cache_dir()) / key
    if (entry / "kb.json").is_file():
        try:
            return _read_entry(entry, config, key)
        except (OSError, ValueError, KeyError):
            shutil.rmtree(entry, ignore_errors=True)  # unreadable entry: build it again
    passages = chunk_folder(folder, allow_instructions)
    embedder = passage_embedder()
    vectors = embedder.embed([p.text for p in passages], progress="embedding passages" if progress else None)
    docs = load_kb(folder, allow_instructions)
    sentences = SentenceIndex.build(docs, embedder, "embedding sentences" if progress else None)
    kb = KnowledgeBase(PassageIndex(passages, vectors, config), docs, sentences, key, False, quarantine_report(folder))
    _write_entry(entry, kb)
    return kb


def _write_entry(entry: Path, kb: KnowledgeBase) -> None:
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=entry.parent, prefix=".tmp-"))
    except OSError:
        return
    try:
        write_jsonl(tmp / "passages.jsonl", [asdict(p) for p in kb.index.passages])
        np.save(tmp / "passages.npy", kb.index.vectors)
        kb.sentences.save(tmp / "sentences.jsonl", tmp / "sentences.npy")
        (tmp / "kb.json").write_text(json.dumps({"docs": kb.docs, "quarantined": kb.quarantined},
                                                       ensure_ascii=False), encoding="utf-8")
        tmp.rename(entry)
    except OSError:  # another process stored it first, or the disk is full: the entry is only an optimisation
        shutil.rmtree(tmp, ignore_errors=True)


def _read_entry(entry: Path, config: HybridConfig, key: str) -> KnowledgeBase:
    passages = [Passage(r["id"], r["doc"], r["text"], r["heading"])
                for r in read_jsonl(entry / "passages.jsonl", ("id", "doc", "text", "heading"))]
    meta = json.loads((entry / "kb.json").read_text(encoding="utf-8"))
    sentences = SentenceIndex.load(entry / "sentences.jsonl", entry / "sentences.npy")
    return KnowledgeBase(PassageIndex(passages, np.load(entry / "passages.npy"), config), meta["docs"], sentences, key,
                         True, meta["quarantined"])


def load_into_store(kb: KnowledgeBase, store: str) -> int:
    """Write ``kb``'s passages and vectors into the PostgreSQL + pgvector ``store`` under its cache key (what
    `open_kb` with ``store`` reads); returns the number of passages. ConnectionError when the store is down."""
    from rag.retrieval.pgvector import PgVectorStore

    db = PgVectorStore(store)
    try:
        return db.load(kb.key, kb.index.passages, kb.index.vectors)
    finally:
        db.close()
