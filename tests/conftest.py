import os
from pathlib import Path

import pytest
import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def params():
    with open(ROOT / "params.yaml", encoding="utf-8") as f:
        return yaml.safe_load(f)


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
