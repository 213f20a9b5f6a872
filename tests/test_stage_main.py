"""stages/common.main: how a stage reports a bad input (one line naming the file, exit 1) and what it leaves alone."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "stages"))
import common  # noqa: E402


@pytest.fixture(autouse=True)
def _keep_sigterm():
    """common.main installs a SIGTERM handler; the test process gets its own back."""
    import signal

    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


def test_a_missing_file_is_one_line_naming_it(capsys):
    def stage():
        open("/nonexistent/models/e5-small.onnx", "rb")

    with pytest.raises(SystemExit) as e:
        common.main(stage)
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert err == "error: /nonexistent/models/e5-small.onnx: No such file or directory\n"


def test_an_input_error_is_its_message(capsys):
    from rag.io import InputError

    def stage():
        raise InputError("params.yaml: select.design: unknown design 'best'")

    with pytest.raises(SystemExit) as e:
        common.main(stage)
    assert e.value.code == 1
    assert capsys.readouterr().err == "error: params.yaml: select.design: unknown design 'best'\n"


def test_an_os_error_about_no_file_keeps_its_traceback():
    def stage():
        raise ConnectionRefusedError(111, "Connection refused")

    with pytest.raises(ConnectionRefusedError):
        common.main(stage)


def test_a_bad_fusion_weight_grid_is_one_line_naming_its_key(capsys):
    """stages ko_retrieval and finetune_eval check their grids with common.check_weight_grid before any work."""
    common.check_weight_grid([0, 0.5, 1], "finetune.convex_weight_grid")  # a good grid passes
    for bad in ([], [0, 0], [1, -1], "0 1", [True, 1]):
        with pytest.raises(SystemExit) as e:
            common.main(lambda: common.check_weight_grid(bad, "ko.learned.convex_weight_grid"))
        assert e.value.code == 1
        assert capsys.readouterr().err == ("error: params.yaml: ko.learned.convex_weight_grid must list some weights "
                                           f">= 0, one of them above 0, got {bad!r}\n")


def test_written_files_get_the_umask_mode_not_owner_only(tmp_path):
    # a bad-input pass (session 41): mkstemp's temp file made every stage output -rw------- after the rename
    import os

    from rag.io import write_json

    mask = os.umask(0o022)
    os.umask(mask)
    write_json(tmp_path / "m.json", {"a": 1})
    assert (tmp_path / "m.json").stat().st_mode & 0o777 == 0o666 & ~mask
