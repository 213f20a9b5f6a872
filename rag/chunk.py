"""Split a knowledge-base folder of Markdown files into passages."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rag.io import InputError


@dataclass(frozen=True)
class Passage:
    """One paragraph of a KB document. ``id`` is ``"<doc>#<n>"`` with n counted from 1."""

    id: str
    doc: str
    text: str


def chunk_document(doc: str, text: str) -> list[Passage]:
    """Split ``text`` on blank lines; drop empty pieces and headings (pieces starting with ``#``);
    fold whitespace runs to one space."""
    pieces = [" ".join(p.split()) for p in text.replace("\r\n", "\n").split("\n\n")]
    kept = [p for p in pieces if p and not p.startswith("#")]
    return [Passage(f"{doc}#{n}", doc, p) for n, p in enumerate(kept, 1)]


def chunk_folder(folder: str | Path) -> list[Passage]:
    """Passages of every ``*.md`` file in ``folder``, files in name order; doc = file stem.

    Raises InputError if the folder is missing, holds no .md file, has a .md that is not a
    readable UTF-8 file, or yields no passage at all (for example heading-only files).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: knowledge-base folder not found")
    files = sorted(folder.glob("*.md"))
    if not files:
        raise InputError(f"{folder}: no .md files")
    passages = []
    for f in files:
        if not f.is_file():
            raise InputError(f"{f}: not a readable file (a folder or a broken link)")
        try:
            text = f.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise InputError(f"{f}: not UTF-8 text ({e.reason} at byte {e.start})") from None
        passages.extend(chunk_document(f.stem, text))
    if not passages:
        raise InputError(f"{folder}: no passages (every file is empty or headings only)")
    return passages


def load_kb(folder: str | Path) -> dict[str, str]:
    """``{doc name: full text}`` of every ``*.md`` in ``folder`` (the form `rag.verify` takes)."""
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(Path(folder).glob("*.md"))}
