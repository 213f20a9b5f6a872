"""Stage fetch_data: the public data sets (HeySQuAD dev-common, KorQuAD 1.0 dev) into ``data.dest_dir``.

Reads params ``data``: for each ``files`` entry (a path under ``shared_dir`` and ``dest_dir``: its ``url`` and
``sha256``) the verbatim copy under ``shared_dir`` is used when present, else the file is downloaded from ``url``
(`rag.fetch.fetch`); either way its sha256 is checked. Writes ``{dest_dir}/{path}`` (git-ignored, DVC-cached:
never committed; KorQuAD's licence forbids redistribution). Every file is tried; each one that cannot be put in
place prints one ``error:`` line (file, URL, where to put it) and the stage exits 1.
"""
import os
import sys
import time
from pathlib import Path

from common import ROOT, main, params
from rag.fetch import FetchError, fetch


def place(folder: str, rel: str) -> Path:
    """``folder/rel``: an absolute ``folder`` as it is, a relative one (from the repository root) made relative to
    the working directory (DVC runs stages from the root), so that messages show the paths as params write them."""
    path = Path(folder) / rel
    return path if path.is_absolute() else Path(os.path.relpath(ROOT / path))


def run():
    d = params()["data"]
    t0 = time.perf_counter()
    done, failed = [], []
    for rel, f in d["files"].items():
        try:
            done.append(fetch(place(d["dest_dir"], rel), str(f["url"]), str(f["sha256"]),
                              local=place(d["shared_dir"], rel), timeout_s=float(d["timeout_s"])))
        except FetchError as e:
            failed.append(e)
            print(f"error: {e}", file=sys.stderr)
    if failed:
        sys.exit(1)
    local = sum(not x.source.startswith(("http://", "https://")) for x in done)
    print(f"fetch_data: {len(done)} files, {local} from {d['shared_dir']}, {len(done) - local} "
          f"downloaded, {sum(x.size for x in done) / 1e6:.1f} MB, {time.perf_counter() - t0:.1f} s")


main(run)
