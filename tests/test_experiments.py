"""The experiment workflow of the README (issue 18), run for real in a throwaway copy of the working tree:
`dvc exp run -S key=value <light target>` succeeds and `dvc exp show --json` holds the changed param and the
metrics. The user's workspace is never touched (its files are copied, git and DVC run in tmp)."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT


def _git(*args, cwd):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def exp_repo(tmp_path_factory):
    """A git + DVC repo holding the working tree's tracked and not-ignored files, one commit, no outputs yet."""
    repo = tmp_path_factory.mktemp("exp") / "repo"
    files = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT).split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    _git("init", "-q", cwd=repo)
    _git("config", "user.name", "voice-rag test", cwd=repo)
    _git("config", "user.email", "test@example.invalid", cwd=repo)
    _git("add", "-A", cwd=repo)
    _git("commit", "-q", "-m", "baseline", cwd=repo)
    return repo


def test_stages_import_their_own_checkout(exp_repo):
    # queued and --temp experiments run in a copy: `rag` must come from that copy, not the editable install
    done = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, 'stages'); import common, rag; "
                           "print(rag.__file__)"], cwd=exp_repo, capture_output=True, text=True, check=True)
    assert Path(done.stdout.strip()).is_relative_to(exp_repo)


def _dvc(repo: Path, *args: str) -> str:
    env = dict(os.environ, DVC_NO_ANALYTICS="1", HF_HUB_OFFLINE="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=repo, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"dvc {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _experiments(repo: Path) -> dict[str, dict]:
    """``{experiment name: its data}`` from `dvc exp show --json` (DVC 3 layout)."""
    out = {}
    for baseline in json.loads(_dvc(repo, "exp", "show", "--json")):
        for exp in baseline.get("experiments") or []:
            for rev in exp["revs"]:
                out[rev["name"]] = rev["data"]
    return out


def _param(data: dict, dotted: str):
    value = data["params"]["params.yaml"]["data"]
    for key in dotted.split("."):
        value = value[key]
    return value


@pytest.mark.parametrize("name, override, target, metrics_file, check", [
    ("dense", "retrieval.mode=dense", "evaluate", "metrics/voice/retrieval.json",
     lambda m: m["mode"] == "dense" and 0 < m["raw"]["recall_at_3"] <= 1),
    ("erm", "rewrite.fillers=[um,uh,oh,er,ah,like,okay,ok,'o k',hi,hello,so,well,ohi,erm]", "evaluate",
     "metrics/voice/retrieval.json", lambda m: 0 < m["rewritten"]["mrr_at_10"] <= 1),
    ("top1", "abstain.signal=top1", "threshold", "metrics/voice/threshold.json",
     lambda m: 0 < m["tau"] < 1),
])
def test_exp_run_set_param(exp_repo, name, override, target, metrics_file, check):
    workspace_params = (ROOT / "params.yaml").read_text(encoding="utf-8")
    _dvc(exp_repo, "exp", "run", "--name", name, "-S", override, target)
    data = _experiments(exp_repo)[name]
    key, value = override.split("=", 1)
    if not value.startswith("["):
        assert _param(data, key) == value
    else:
        assert _param(data, key)[-1] == "erm" and "on" in _param(data, "retrieval.stopwords")
    assert check(data["metrics"][metrics_file]["data"])
    assert (ROOT / "params.yaml").read_text(encoding="utf-8") == workspace_params
