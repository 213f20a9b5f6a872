"""Every rag module a DVC stage runs is one of its deps, so that `dvc repro` reruns it when that code changes."""
import ast
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def imported_modules(path: Path) -> set[str]:
    """The rag.* and stage-local modules a file imports anywhere (module level or inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)  # `from rag import config`
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def module_file(name: str) -> Path | None:
    """The file of a rag.* module (a package's __init__.py) or of a stage-local module (stages/common.py,
    stages/selection_sets.py); None for anything else."""
    if (ROOT / "stages" / f"{name}.py").is_file():
        return ROOT / "stages" / f"{name}.py"
    if name != "rag" and not name.startswith("rag."):
        return None
    base = ROOT / Path(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def closure(script: Path) -> set[Path]:
    """The script and every rag file it reaches through imports, and through the CLI when it runs ``python -m rag``
    in a subprocess (stage bench_cli: no import names rag/__main__.py)."""
    seen, todo = set(), [script]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        if '"-m", "rag"' in f.read_text(encoding="utf-8"):
            todo.append(ROOT / "rag" / "__main__.py")
        for name in imported_modules(f):
            target = module_file(name)
            if target is not None:
                todo.append(target)
    return seen


def covered(f: Path, deps: list[str]) -> bool:
    rel = f.relative_to(ROOT)
    return any(rel == Path(d) or Path(d) in rel.parents for d in deps)


def test_every_stage_lists_the_rag_code_it_runs():
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    missing = {}
    for name, stage in stages.items():
        if stage.get("frozen"):
            continue  # run by hand, outputs committed: dvc never reruns them
        script = ROOT / next(t for t in stage["cmd"].split() if t.endswith(".py"))
        lacking = sorted(str(f.relative_to(ROOT)) for f in closure(script)
                         if f.name != "__init__.py" or f.parent.name != "rag"
                         if not covered(f, stage["deps"]))
        if lacking:
            missing[name] = lacking
    assert missing == {}
