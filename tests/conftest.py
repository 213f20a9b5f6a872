import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Property tests (tests/test_properties.py) are deterministic: the same examples on every run, no example database
# written into the tree, no per-example deadline (a shared 2-core machine is slow at times).
settings.register_profile("repo", derandomize=True, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("repo")
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def params():
    from rag.io import read_params

    return read_params(ROOT / "params.yaml")


@pytest.fixture
def small_kb(tmp_path):
    """Four documents: enough for BM25's idf to be positive."""
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "kb-hours.md").write_text(
        "# Hours\n\nOn weekdays we are open from 8:30 a.m. to 6 p.m. On Saturday we are open from "
        "9 a.m. to 1 p.m. We are closed on Sunday.\n")
    (kb / "kb-refills.md").write_text(
        "# Refills\n\nPrescription refills are processed within 3 business days.\n\n"
        "Ask your pharmacy to send the refill request.\n")
    (kb / "kb-labs.md").write_text("# Labs\n\nLab results are ready within 3 business days. A blood test costs $45.\n")
    (kb / "kb-billing.md").write_text(
        "# Billing\n\nWe accept cash, debit and credit cards. We do not accept personal checks.\n")
    return kb


def public_data(path: str) -> Path:
    """A public data set's file (``path`` under params ``data.dest_dir`` / ``data.shared_dir``, e.g.
    "heysquad/dev-common-original-1002.json"): where stage fetch_data put it (`make repro`), else the verbatim copy
    beside the checkout (../shared/data). Fails the test naming both places when neither has it: these tests need
    the data, they are not skipped."""
    from rag.io import read_params

    d = read_params(ROOT / "params.yaml")["data"]
    for base in (ROOT / d["dest_dir"], ROOT / d["shared_dir"]):
        if (base / path).exists():
            return base / path
    inside = sorted(f for f in d["files"] if f.startswith(path.rstrip("/") + "/"))  # a folder: name its files
    pytest.fail(f"{path}{' (' + ', '.join(inside) + ')' if inside else ''}: not in {d['dest_dir']}/ (run `make repro`: "
                f"stage fetch_data downloads it) nor in {d['shared_dir']}/ (README, first paragraph)")


def write_params(path, p: dict):
    """Write a params mapping as YAML 1.2 (ruamel.yaml, the dialect DVC writes and `rag.io.read_params` reads)."""
    from ruamel.yaml import YAML

    with open(path, "w", encoding="utf-8") as f:
        YAML(typ="safe").dump(p, f)
    return path


@pytest.fixture(scope="session")
def redis_server():
    """A valkey-server (Redis protocol) on a Unix socket in a temp folder, for the whole session (rag/memory/servers.py)."""
    from rag.memory.servers import start_redis

    server = start_redis()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL 18 on a Unix socket in a temp folder, for the whole session (rag/memory/servers.py)."""
    from rag.memory.servers import start_postgres

    server = start_postgres()
    yield server
    server.stop()


def gone_within(pid: int, seconds: float) -> bool:
    """True once process ``pid`` no longer exists (polled every 0.2 s), False if it still does after ``seconds``."""
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False
