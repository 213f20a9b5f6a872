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


@pytest.fixture(autouse=True)
def _forget_the_command_line():
    """common.main keeps the command line it parsed; later tests read params.yaml, not a test's --params."""
    yield
    common._ARGS = None


def test_a_missing_file_is_one_line_naming_it(capsys):
    def stage():
        open("/nonexistent/models/e5-small.onnx", "rb")

    with pytest.raises(SystemExit) as e:
        common.main(stage, argv=[])
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert err == "error: /nonexistent/models/e5-small.onnx: No such file or directory\n"


def test_an_input_error_is_its_message(capsys):
    from rag.io import InputError

    def stage():
        raise InputError("params.yaml: select.design: unknown design 'best'")

    with pytest.raises(SystemExit) as e:
        common.main(stage, argv=[])
    assert e.value.code == 1
    assert capsys.readouterr().err == "error: params.yaml: select.design: unknown design 'best'\n"


def test_an_os_error_about_no_file_keeps_its_traceback():
    def stage():
        raise ConnectionRefusedError(111, "Connection refused")

    with pytest.raises(ConnectionRefusedError):
        common.main(stage, argv=[])


def test_a_bad_fusion_weight_grid_is_one_line_naming_its_key(capsys):
    """stages ko_retrieval and finetune_eval check their grids with common.check_weight_grid before any work."""
    common.check_weight_grid([0, 0.5, 1], "finetune.convex_weight_grid")  # a good grid passes
    for bad in ([], [0, 0], [1, -1], "0 1", [True, 1]):
        with pytest.raises(SystemExit) as e:
            common.main(lambda: common.check_weight_grid(bad, "ko.learned.convex_weight_grid"), argv=[])
        assert e.value.code == 1
        assert capsys.readouterr().err == (f"error: {common.ROOT / 'params.yaml'}: ko.learned.convex_weight_grid must "
                                           f"list some weights >= 0, one of them above 0, got {bad!r}\n")
    with pytest.raises(SystemExit):  # under --params the message names that file
        common.main(lambda: common.check_weight_grid([], "ko.learned.convex_weight_grid"), argv=["--params", "mine.yaml"])
    assert capsys.readouterr().err.startswith("error: mine.yaml: ko.learned.convex_weight_grid must list")


def test_variant_merges_its_section_over_the_recipe_and_a_missing_one_names_the_params_file(capsys):
    p = {"recipe": {"lr": 1e-4, "epochs": 3, "model": "a.onnx"}, "recipe_big": {"epochs": 5, "model": "b.onnx"}}
    seen = {}
    common.main(lambda: seen.update(zip(("name", "settings"), common.variant_section(p, "recipe"))),
                common.variant_option("recipe"), argv=["--variant", "recipe_big"])
    assert seen == {"name": "recipe_big", "settings": {"lr": 1e-4, "epochs": 5, "model": "b.onnx"}}
    common.main(lambda: seen.update(zip(("name", "settings"), common.variant_section(p, "recipe"))),
                common.variant_option("recipe"), argv=[])
    assert seen == {"name": "recipe", "settings": p["recipe"]}
    with pytest.raises(SystemExit) as e:
        common.main(lambda: common.variant_section(p, "recipe"), common.variant_option("recipe"),
                    argv=["--variant", "recipe_huge", "--params", "mine.yaml"])
    assert e.value.code == 1
    assert capsys.readouterr().err == "error: mine.yaml: no section 'recipe_huge' (--variant names a params section)\n"


def test_a_stage_measuring_what_is_said_runs_without_the_turn_deadline_and_leaves_params_alone():
    p = {"answer": {"deadline_s": 3.0, "reserve_s": 0.5, "mode": "choose"}, "llm": {"timeout_s": 60}}
    q = common.without_deadline(p)
    assert q == {"answer": {"deadline_s": 0, "reserve_s": 0.5, "mode": "choose"}, "llm": {"timeout_s": 60}}
    assert p["answer"]["deadline_s"] == 3.0


def test_written_files_get_the_umask_mode_not_owner_only(tmp_path):
    # a bad-input pass (session 41): mkstemp's temp file made every stage output -rw------- after the rename
    import os

    from rag.io import write_json

    mask = os.umask(0o022)
    os.umask(mask)
    write_json(tmp_path / "m.json", {"a": 1})
    assert (tmp_path / "m.json").stat().st_mode & 0o777 == 0o666 & ~mask


def test_a_misspelt_argument_stops_the_stage_before_any_work(capsys):
    # `python stages/heysquad_embed.py --hlep` used to run the stage (arguments were parsed leniently), and argparse
    # takes `--redecid` for `--redecide` by default; a misspelt flag of ko_generate_models would run its 600 LLM calls
    # and overwrite its committed metrics
    ran = []
    with pytest.raises(SystemExit) as e:
        common.main(lambda: ran.append(1), lambda ap: ap.add_argument("--redecide", action="store_true"),
                    argv=["--redecid"])
    assert e.value.code == 2 and ran == []
    assert "unrecognized arguments: --redecid" in capsys.readouterr().err


def test_a_stage_reads_its_own_options_and_params_path(tmp_path):
    seen = {}

    def stage():
        seen.update(vars(common.args()))

    common.main(stage, lambda ap: ap.add_argument("--rechoose", action="store_true"),
                argv=["--rechoose", "--params", str(tmp_path / "mine.yaml")])
    assert seen == {"rechoose": True, "params": str(tmp_path / "mine.yaml")}


def test_help_prints_the_stage_docstring_and_its_options():
    import subprocess

    stages = Path(__file__).resolve().parents[1] / "stages"
    done = subprocess.run([sys.executable, str(stages / "ko_answer_gate.py"), "--help"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Stage ko_answer_gate (issue 12; FROZEN" in done.stdout
    assert "--rechoose" in done.stdout and "choose again on the stored replies, no LLM call" in done.stdout
    assert "--params PARAMS" in done.stdout


@pytest.mark.parametrize("key, value, message", [
    ("query_rounds", 0, "bench.query_rounds must be a finite number >= 1, got 0"),
    ("query_passes", True, "bench.query_passes must be a number, got True"),
    ("query_rounds", 2.5, "bench.query_rounds must be a whole number, got 2.5"),
    ("query_encoders", ["minilm", "minilm"], "bench.query_encoders must list distinct embed.encoders names"),
    ("query_encoders", ["minilm", "nosuch"], "bench.query_encoders: an encoder name must be one of embed.encoders"),
])
def test_query_latency_names_a_bad_bench_key_before_any_timing(tmp_path, capsys, key, value, message):
    """Stage query_latency checks its keys before it loads a model (a helper found int() taking True and 2.7, and
    tracebacks for 0 and 'five'); nothing is written."""
    import runpy

    import yaml

    p = yaml.safe_load((common.ROOT / "params.yaml").read_text())
    p["bench"][key] = value
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(p))
    out = common.ROOT / "metrics" / "voice" / "query_latency.json"
    before = out.read_bytes()
    stage = runpy.run_path(str(common.ROOT / "stages" / "query_latency.py"))   # not as __main__: defines run only
    with pytest.raises(SystemExit) as e:
        common.main(stage["run"], argv=["--params", str(tmp_path / "p.yaml")])
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'p.yaml'}: {message}") and err.count("\n") == 1
    assert out.read_bytes() == before


@pytest.mark.parametrize("change, message", [
    ({"serve": "fastest"}, "finetune_e5_l10_query.serve must be smallest, or q8 with side queries; got 'fastest'"),
    ({"side": "both"}, "finetune_e5_l10_query.serve must be smallest, or q8 with side queries; got 'q8' with 'both'"),
    ({"start": "models/no-such.onnx"}, "finetune_e5_l10_query.start: no encoder file "),
])
def test_finetune_e5_names_a_bad_start_or_serve_before_any_data_or_training(tmp_path, change, message):
    """The keys session 57 added for stage finetune_e5_l10_query (frozen; retraining needs make train) are checked
    first: one line naming the params file, exit 1, nothing written."""
    import subprocess
    import sys

    import yaml

    p = yaml.safe_load((common.ROOT / "params.yaml").read_text())
    p["finetune_e5_l10_query"].update(change)
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(p))
    out = common.ROOT / "metrics" / "finetune" / "e5_l10_query.json"
    before = out.read_bytes()
    r = subprocess.run([sys.executable, str(common.ROOT / "stages" / "finetune_e5.py"), "--variant",
                        "finetune_e5_l10_query", "--params", str(tmp_path / "p.yaml")], capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.startswith(f"error: {tmp_path / 'p.yaml'}: {message}")
    assert r.stderr.count("\n") == 1 and out.read_bytes() == before


@pytest.mark.parametrize("change, message", [
    ({"retrieval": {"fusion": "max"}}, "fit_selection_e5_fourth: retrieval.fusion must be one of"),
    ({"retrieval": {"sentence_wieght": 1.0}}, "fit_selection_e5_fourth.retrieval: no such retrieval keys ['sentence_wieght']"),
    ({"embed_model": "nosuch"}, "fit_selection_e5_fourth: "),
    ({"metrics_file": None}, "--variant fit_selection_e5_fourth: needs a section with embed_model, retrieval and"),
])
def test_fit_selection_variant_is_checked_before_any_work_and_writes_nothing(tmp_path, change, message):
    """Stage fit_selection_e5_fourth (session 58) measures another chain; a bad section is one line naming the params
    file, exit 1, and neither the shipped scorers nor any metrics file is touched."""
    import subprocess
    import sys

    import yaml

    p = yaml.safe_load((common.ROOT / "params.yaml").read_text())
    section = p["fit_selection_e5_fourth"]
    for k, v in change.items():
        if v is None:
            del section[k]
        else:
            section[k] = v
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(p))
    kept = [common.ROOT / "models" / "selection-linear.json", common.ROOT / "metrics" / "heysquad" / "selection.json"]
    before = [f.read_bytes() for f in kept]
    r = subprocess.run([sys.executable, str(common.ROOT / "stages" / "fit_selection.py"), "--variant",
                        "fit_selection_e5_fourth", "--params", str(tmp_path / "p.yaml")], capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.startswith(f"error: {tmp_path / 'p.yaml'}: {message}"), r.stderr
    assert r.stderr.count("\n") == 1 and [f.read_bytes() for f in kept] == before
