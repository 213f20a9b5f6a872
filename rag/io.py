"""Reading inputs with errors that name file and line; writing outputs atomically."""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import unicodedata
from pathlib import Path
from typing import Any, Iterable


class InputError(ValueError):
    """Bad input: the message names the file and line (or the query id)."""


def sha256_of(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, read 1 MiB at a time. Raises OSError for a missing or unreadable file."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


# Hangul in any form: conjoining jamo, compatibility jamo, jamo extended A/B, syllables, half-width jamo; assigned
# code points only (an unassigned one such as U+D7FC is no letter: the rewrite drops it, so it must not pick the form).
_HANGUL = re.compile("[\u1100-\u11ff\u3131-\u318e\ua960-\ua97c\uac00-\ud7a3\ud7b0-\ud7c6\ud7cb-\ud7fb"
                     "\uffa0-\uffbe\uffc2-\uffc7\uffca-\uffcf\uffd2-\uffd7\uffda-\uffdc]")


def normalise_text(text: str) -> str:
    """The one Unicode normalisation applied to every text entering the system (KB passages and
    documents, queries, a typed question), so that passages and queries compare equal however typed.

    Rule: text holding any Hangul -> NFC; any other text -> NFKC. NFKC folds full-width forms
    ("ｆｌｕ ｓｈｏｔ" -> "flu shot"), ligatures and decomposed accents (NFD "café" -> "café"); it leaves
    composed Hangul syllables alone, but it rewrites compatibility jamo ("ㅋ" U+314B -> "ᄏ" U+110F) and
    half-width jamo, so Korean text gets NFC, which only composes (NFD Hangul -> syllables) and keeps
    already-NFC Korean text (KorQuAD) exactly as it is. Leading byte-order marks are dropped (all of them, so that
    normalising twice changes nothing).
    """
    text = text.lstrip("\ufeff")
    form = "NFC" if _HANGUL.search(text) else "NFKC"
    return text if unicodedata.is_normalized(form, text) else unicodedata.normalize(form, text)


def line_of_byte(data: bytes, offset: int) -> int:
    """The 1-based line of ``data`` that byte ``offset`` is on (for errors that name a file and line)."""
    return data.count(b"\n", 0, offset) + 1


def read_jsonl(path: str | Path, required: Iterable[str] = ()) -> list[dict]:
    """Read a JSON-lines file; blank lines are skipped.

    Read as ``utf-8-sig``: a leading UTF-8 byte-order mark is dropped. Lines end in LF, CRLF or CR (the file's
    universal newlines, as `open` counts lines); U+2028 and other separators inside a line are no line ends.
    Raises InputError naming ``path:line`` for a missing file, invalid JSON (also a number of more than 4300
    digits or nesting too deep for the decoder), a row that is not an object, or a row lacking one of the
    ``required`` fields.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: {'a folder, not a file' if path.is_dir() else 'file not found'}")
    rows = []
    required = list(required)
    try:
        lines = path.read_text(encoding="utf-8-sig").split("\n")  # read_text made CRLF and CR "\n"
    except UnicodeDecodeError as e:
        raise InputError(f"{path}:{line_of_byte(e.object, e.start)}: not UTF-8 text ({e.reason} at byte "
                         f"{e.start})") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}:{n}: invalid JSON ({e.msg})") from None
        except (ValueError, RecursionError) as e:  # an int of > 4300 digits; "[[[[..." deeper than the decoder goes
            raise InputError(f"{path}:{n}: invalid JSON ({str(e).split(';')[0]})") from None
        if not isinstance(row, dict):
            raise InputError(f"{path}:{n}: expected a JSON object")
        missing = [k for k in required if k not in row]
        if missing:
            raise InputError(f"{path}:{n}: missing field(s) {', '.join(missing)}")
        rows.append(row)
    return rows


def read_params(path: str | Path) -> dict:
    """A params file (params.yaml) as a dict, read the way DVC reads and writes it: YAML 1.2 with
    ruamel.yaml's safe loader. ``dvc exp run -S key=value`` rewrites the whole file with ruamel.yaml's
    YAML 1.2 writer, which drops the quotes around on/off/yes/no (strings in YAML 1.2, booleans to a
    YAML 1.1 loader such as PyYAML); reading with the same dialect keeps every value DVC did not set.

    Raises InputError naming ``path`` (and the line) for a missing or non-UTF-8 file, invalid YAML,
    a duplicate key, or a document that is not a mapping.
    """
    from ruamel.yaml import YAML, YAMLError

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"{path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text") from None
    try:
        p = YAML(typ="safe").load(text)
    except YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"{path}{line}: invalid YAML ({problem})") from None
    if not isinstance(p, dict):
        raise InputError(f"{path}: expected a mapping of sections (see params.yaml)")
    return p


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


NEW_FILE_MODE = 0o666 & ~_umask()  # what open() gives a new file; a temp file from mkstemp is 0600 (owner-only)


def _atomic(path: str | Path, write) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.chmod(tmp, NEW_FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` via a temp file + rename: readers never see half a file."""
    _atomic(path, lambda f: f.write(text.encode("utf-8")))


def write_json(path: str | Path, obj: Any) -> None:
    """Atomically write ``obj`` as indented JSON with sorted keys (stable diffs)."""
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def write_jsonl(path: str | Path, rows: Iterable[dict]) -> None:
    """Atomically write one JSON object per line (keys in insertion order)."""
    write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def write_npy(path: str | Path, array) -> None:
    """Atomically write a numpy array in .npy format."""
    import numpy as np

    _atomic(path, lambda f: np.save(f, array))
