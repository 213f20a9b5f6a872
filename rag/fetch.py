"""Public data files put in place and checked by sha256: a verbatim local copy when there is one, else a download.

Pure library (no params, no argv): stage fetch_data (`stages/fetch_data.py`) calls `fetch` once per file of
params ``data.files``. Whatever happens, ``dest`` is either the complete, checked file or absent: bytes go to a
temporary file next to it, renamed over ``dest`` only after the sha256 matched.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import NamedTuple

from rag.io import NEW_FILE_MODE, sha256_of

CHUNK = 1 << 20  # bytes read or received at a time


class FetchError(RuntimeError):
    """A public data file could not be put in place. The message is ONE line naming the file, its URL and where a
    copy may be put by hand (the local-copy path and ``dest``), or, for a wrong file, the two sha256 hashes."""


class Fetched(NamedTuple):
    path: Path      # ``dest``, complete and checked
    source: str     # the local copy's path or the URL it came from
    size: int       # bytes


def _where(dest: Path, local: Path | None) -> str:
    return f"put it at {local} or at {dest}" if local is not None else f"put it at {dest}"


def _write_checked(dest: Path, chunks, sha256: str, what: str) -> int:
    """Write ``chunks`` (an iterable of bytes) to a temporary file in ``dest``'s folder, check its sha256 and
    rename it to ``dest``; returns the size in bytes. Raises FetchError (both hashes) on a mismatch; the
    temporary file is removed on any error, so nothing half-written is left."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    try:
        h, size = hashlib.sha256(), 0
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                h.update(chunk)
                f.write(chunk)
                size += len(chunk)
        if h.hexdigest() != sha256:
            raise FetchError(f"{what}: sha256 {h.hexdigest()}, expected {sha256}")
        os.chmod(tmp, NEW_FILE_MODE)
        os.replace(tmp, dest)
        return size
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _file_chunks(path: Path):
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            yield chunk


def fetch(dest: str | Path, url: str, sha256: str, local: str | Path | None = None,
          timeout_s: float = 60.0) -> Fetched:
    """Put the file whose bytes hash to ``sha256`` (lowercase hex) at ``dest``.

    ``local`` (a verbatim copy, e.g. under ../shared/data) is used when it exists: its bytes are copied to ``dest``
    if their sha256 matches; a local copy with another sha256 is an error (it is never silently replaced by a
    download). Without a local copy the file is downloaded from ``url`` with `requests` (proxy settings from the
    environment); ``timeout_s`` (seconds) bounds the connection and each wait for data, not the whole transfer.

    Returns a `Fetched` (dest, the source used, size in bytes). Raises FetchError, one line: the local copy's or
    the download's sha256 differs (both hashes named), or the download failed (unreachable host, timeout, HTTP
    status >= 400: the message names the file, the URL and both places the file may be put by hand), or the local
    copy could not be read or copied (OSError). ``dest`` is
    never left half-written: it is the checked file, or what it was before the call.
    """
    import requests

    dest, sha256 = Path(dest), sha256.lower()
    local = Path(local) if local is not None else None
    if local is not None and local.is_file():
        try:
            size = _write_checked(dest, _file_chunks(local), sha256,
                                  f"{local}: local copy of {url} is not the expected file")
        except OSError as e:
            raise FetchError(f"{local}: cannot copy to {dest} ({e.strerror or e})") from None
        return Fetched(dest, str(local), size)
    try:
        with requests.get(url, stream=True, timeout=timeout_s) as r:
            if r.status_code >= 400:
                raise FetchError(f"cannot download {dest.name} from {url} (HTTP {r.status_code}); "
                                 f"{_where(dest, local)} (sha256 {sha256})")
            size = _write_checked(dest, r.iter_content(CHUNK), sha256, f"{dest.name} downloaded from {url}")
    except requests.RequestException as e:
        raise FetchError(f"cannot download {dest.name} from {url} ({type(e).__name__}); "
                         f"{_where(dest, local)} (sha256 {sha256})") from None
    return Fetched(dest, url, size)
