"""rag.train.spoken: more spoken training questions (the TTS -> ASR chain itself needs the voice extra and sox, which
the test environment lacks; the frozen transcribe stage exercises it). Here a stand-in recogniser checks which text
and which noise level each new form gets, and that the order of the rows survives the worker pool."""
import pytest

from rag.train.spoken import spoken_forms


def hears(text: str, snr_db: float | None) -> str:
    """A stand-in recogniser: the text lower-cased, tagged with the noise it was given."""
    return f"{text.lower()} @{snr_db}"


QUERIES = [{"id": f"q{i}", "typed": f"Question {i}?", "human": "x"} for i in range(7)]


def test_each_kind_is_its_own_form_with_its_noise():
    rows = spoken_forms(QUERIES, ["clean", "noisy"], 20, processes=2, transcriber=hears)
    assert [r["id"] for r in rows] == [f"q{i}" for i in range(7)]
    assert rows[3] == {"id": "q3", "typed": "Question 3?", "human": "x",
                       "pocketsphinx_clean": "question 3? @None", "pocketsphinx_noisy": "question 3? @20"}


def test_one_kind_and_progress():
    seen = []
    rows = spoken_forms(QUERIES[:2], ["noisy"], 5.0, processes=1, transcriber=hears,
                        progress=lambda done, total: seen.append((done, total)))
    assert [r["pocketsphinx_noisy"] for r in rows] == ["question 0? @5.0", "question 1? @5.0"]
    assert "pocketsphinx_clean" not in rows[0]
    assert seen == [(2, 2)]


def test_unknown_kind():
    with pytest.raises(ValueError, match=r"unknown spoken kind\(s\) \['loud'\]"):
        spoken_forms(QUERIES, ["clean", "loud"], 20, transcriber=hears)


def test_the_real_chain_needs_sox(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(RuntimeError, match="sox is not on PATH"):
        spoken_forms(QUERIES, ["clean"], 20)


def test_a_transcribing_stage_checks_the_pinned_package_and_sox_before_any_work(monkeypatch):
    from importlib.metadata import version

    from rag.voice.speech import check_installed

    with pytest.raises(RuntimeError, match=r"wants numpy==0\.0\.1, installed numpy=="):
        check_installed("numpy==0.0.1")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(RuntimeError, match="sox is not on PATH"):
        check_installed(f"numpy=={version('numpy')}")
