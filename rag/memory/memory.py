"""What the chain uses: `Memory` (short-term store, optional archive, fall back to the embedded store when a
server goes away, never raise into a turn) and `open_memory` (the stores from params values and the environment)."""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable, Mapping

from dataclasses import fields, replace

from rag.memory.store import MemoryUnavailable, Store, Turn, clean_text, open_store, where


def _why(store: Store, e: Exception) -> str:
    return str(e) if isinstance(e, MemoryUnavailable) else f"{store.name} failed ({type(e).__name__})"


class Memory:
    """The turns of calls: read from the short-term store, recorded to it and, when set, to the ``archive``.

    When a store fails (a server unreachable, any error of its driver) during `record` or `history`, the short-term
    store is replaced by ``fallback()`` (the embedded SQLite, opened then) for the rest of this object's life, or by
    no memory when there is no fallback or it fails too; a failed archive is dropped. Each switch calls ``warn``
    once with why and is appended to ``degraded`` (None while healthy, else e.g. ``"redis at 127.0.0.1:6379
    unreachable (ConnectionError): switched to sqlite"``). `record` and `history` never raise. Thread-safe.
    Turns recorded before a switch stay in the old store (they expire there); `history` reads only the new one.
    """

    def __init__(self, short: Store | None, archive: Store | None = None,
                 fallback: Callable[[], Store] | None = None, warn: Callable[[str], None] | None = None):
        self.short = short
        self.archive = archive
        self.degraded: str | None = None
        self._fallback = fallback
        self._fallback_store: Store | None = None
        self._warn = warn
        self._dropped: list[Store] = []
        self._lock = threading.Lock()

    def note(self, why: str) -> None:
        """Record a degradation (also used by `open_memory` for a store that could not be opened): appended to
        ``degraded`` and told to ``warn``."""
        self.degraded = why if self.degraded is None else f"{self.degraded}; {why}"
        if self._warn:
            self._warn(why)

    def _open_fallback(self) -> Store:
        if self._fallback_store is None:
            self._fallback_store = self._fallback()
        return self._fallback_store

    def _fail(self, store: Store, e: Exception) -> None:
        with self._lock:
            why = _why(store, e)
            if store is self.short:
                self._dropped.append(store)
                self.short = None
                if self._fallback is not None and store is not self._fallback_store:
                    try:
                        self.short = self._open_fallback()
                        why += f": switched to {self.short.name}"
                    except Exception as e2:  # noqa: BLE001 - the turn goes on without memory
                        why += f": no memory (fallback failed: {type(e2).__name__})"
                else:
                    why += ": no memory"
            elif store is self.archive:
                self._dropped.append(store)
                self.archive = None
                why += ": no long-term memory"
            else:
                return  # another thread switched already
            self.note(why)

    def record(self, turn: Turn, caller: str | None = None) -> None:
        """Append ``turn`` to the short-term store and the archive (``caller`` stored only as a keyed hash,
        `rag.memory.CallerHasher`). Never raises: a failing store is switched as described above. Text that is not
        valid UTF-8 (lone surrogates from undecodable input) is stored with U+FFFD in their place."""
        turn = replace(turn, **{f.name: clean_text(getattr(turn, f.name)) for f in fields(turn)
                                if isinstance(getattr(turn, f.name), str)})
        store = self.short
        while store is not None:
            try:
                store.append(turn, caller)
                break
            except Exception as e:  # noqa: BLE001 - never into the caller's turn
                self._fail(store, e)
                store = self.short
        if self.archive is not None:
            try:
                self.archive.append(turn, caller)
            except Exception as e:  # noqa: BLE001
                self._fail(self.archive, e)

    def history(self, session: str, limit: int) -> list[Turn]:
        """The session's last ``limit`` unexpired turns from the short-term store, oldest first; ``[]`` with no
        memory. Never raises."""
        session = clean_text(session)
        store = self.short
        while store is not None:
            try:
                return store.turns(session, limit)
            except Exception as e:  # noqa: BLE001
                self._fail(store, e)
                store = self.short
        return []

    def _preference_store(self) -> Store | None:
        """Where preferences live: the archive when it can hold them, else the short-term store (SQL stores can;
        Redis cannot: then none)."""
        for store in (self.archive, self.short):
            if store is not None and hasattr(store, "save_preferences"):
                return store
        return None

    def remember(self, caller: str, prefs: Mapping[str, str], session: str) -> str | None:
        """Store a caller's preferences (`rag.memory.preferences`) stated in ``session``; the backend's name, or None
        when no store can hold them or it failed (noted in ``degraded``). Never raises."""
        store = self._preference_store()
        if store is None or not prefs:
            return None
        try:
            store.save_preferences(clean_text(caller), {k: clean_text(v) for k, v in prefs.items()}, clean_text(session))
            return store.name
        except Exception as e:  # noqa: BLE001 - the call has ended; its preferences are lost, and said so
            self.note(f"{_why(store, e)}: preferences not stored")
            return None

    def preferences(self, caller: str, max_age_s: float) -> dict[str, str]:
        """``{field: value}`` stored for ``caller`` no more than ``max_age_s`` seconds ago; ``{}`` when none, when no
        store can hold them, or when it fails (noted in ``degraded``). Never raises."""
        store = self._preference_store()
        if store is None:
            return {}
        try:
            return store.preferences(clean_text(caller), max_age_s)
        except Exception as e:  # noqa: BLE001 - the turn goes on without them
            self.note(f"{_why(store, e)}: preferences not read")
            return {}

    def forget(self, session: str) -> dict[str, int]:
        """Delete everything of ``session`` from the short-term store, the archive, the fallback (opened for this
        when not yet open) and any store dropped after a failure: ``{backend name: turns deleted}`` (summed when
        two stores share a backend). Raises MemoryUnavailable naming every store that could not be reached, after
        deleting from all the others. A store that could not be opened at start is not known here: its turns
        expire with its TTL (``degraded`` names it)."""
        session = clean_text(session)
        stores: list[Store] = []
        errors: list[str] = []
        candidates = [self.short, self.archive, *self._dropped]
        if self._fallback is not None:
            try:
                candidates.append(self._open_fallback())
            except Exception as e:  # noqa: BLE001
                errors.append(f"fallback store failed ({type(e).__name__})")
        for s in candidates:
            if s is not None and all(s is not t for t in stores):
                stores.append(s)
        out: dict[str, int] = {}
        for s in stores:
            try:
                out[s.name] = out.get(s.name, 0) + s.forget(session)
            except Exception as e:  # noqa: BLE001
                errors.append(_why(s, e))
        if errors:
            raise MemoryUnavailable(f"session not forgotten everywhere: {'; '.join(errors)} (deleted: {out})")
        return out

    def close(self) -> None:
        """Close every store this object opened or was given."""
        for s in {id(s): s for s in (self.short, self.archive, self._fallback_store, *self._dropped) if s}.values():
            try:
                s.close()
            except Exception:  # noqa: BLE001 - a dead server's connection may fail to close
                pass


def open_memory(url: str, archive_url: str, ttl_min: float, retention_days: float,
                cache_dir: str | Path | None = None, warn: Callable[[str], None] | None = None,
                env: Mapping[str, str] = os.environ) -> Memory:
    """`Memory` from the params ``memory:`` values: ``$RAG_MEMORY_URL`` / ``$RAG_MEMORY_ARCHIVE_URL`` (when set and
    not empty) override ``url`` / ``archive_url``. The short-term store keeps a session ``ttl_min`` minutes after
    its latest turn, the archive (``""`` = none) ``retention_days`` days. When the short-term store cannot be
    opened (server down, file unwritable) the embedded SQLite in ``cache_dir`` is used instead; an archive that
    cannot be opened is left out; each is told to ``warn`` and noted in ``degraded``. The embedded SQLite is also
    the mid-call fallback when ``url`` is not empty. When the embedded store cannot be opened either (an
    unwritable cache folder, a corrupt or foreign ``memory.sqlite3``, left as it is) there is no short-term
    memory (``short`` None), noted the same way. Raises ValueError for an unknown URL scheme (never showing the
    password).
    """
    url = env.get("RAG_MEMORY_URL") or url
    archive_url = env.get("RAG_MEMORY_ARCHIVE_URL") or archive_url
    ttl_s = float(ttl_min) * 60.0

    def embedded() -> Store:
        return open_store("", ttl_s, cache_dir)

    fallback = embedded if url else None
    whys = []
    try:
        short = open_store(url, ttl_s, cache_dir)
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001 - any server or file problem: the embedded store instead
        why, short = _why_open(url, e, cache_dir), None
        if fallback is not None:
            try:
                short = embedded()
                why += f": switched to {short.name}"
            except Exception as e2:  # noqa: BLE001 - the calls go on without memory
                why += f"; {_why_open('', e2, cache_dir)}"
        fallback = None
        whys.append(why + ("" if short else ": no memory"))
    archive = None
    if archive_url:
        try:
            archive = open_store(archive_url, float(retention_days) * 86400.0, cache_dir)
        except ValueError:
            raise
        except Exception as e:  # noqa: BLE001
            whys.append(f"archive {_why_open(archive_url, e)}: no long-term memory")
    memory = Memory(short, archive, fallback, warn)
    for why in whys:
        memory.note(why)
    return memory


def _why_open(url: str, e: Exception, cache_dir: str | Path | None = None) -> str:
    if isinstance(e, MemoryUnavailable):
        return str(e)
    if not url:  # the embedded store
        from rag.retrieval.kb_cache import default_cache_dir

        path = Path(cache_dir or default_cache_dir()) / "memory.sqlite3"
        return f"sqlite at {path} could not be opened ({type(e).__name__}: {e})"
    return f"{where(url)} could not be opened ({type(e).__name__})"
