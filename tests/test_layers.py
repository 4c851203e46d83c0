"""The layers of DESIGN.md, checked on the source: analysis/ needs no training, corpus or experiment code;
viz/ renders generic blocks and knows nothing of the experiment.

Imports are read with ``ast`` (module level and inside functions, the lazy ones too) and followed
through attnlab's own modules, so that a layer cannot reach a forbidden one through a third.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "attnlab"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_path(name: str) -> Path | None:
    """The file of an attnlab module (``attnlab.a.b`` → attnlab/a/b.py or attnlab/a/b/__init__.py), else None."""
    base = ROOT.parent.joinpath(*name.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


@lru_cache(maxsize=None)
def direct_imports(path: Path) -> frozenset[str]:
    """The attnlab modules a file imports (``import a.b``, ``from a.b import c`` — c too when it is a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names if module_path(f"{base}.{a.name}") is not None)
    out = set()
    for name in found:
        if name == "attnlab" or name.startswith("attnlab."):
            # importing a.b.c runs a/__init__ and a/b/__init__ too
            parts = name.split(".")
            out.update(".".join(parts[:i]) for i in range(2, len(parts) + 1))
    return frozenset(n for n in out if module_path(n) is not None)


def reachable(name: str) -> dict[str, str]:
    """Every attnlab module imported from ``name``, directly or through others: module → the one importing it."""
    seen, todo = {name: ""}, [name]
    while todo:
        m = todo.pop()
        for dep in direct_imports(module_path(m)):
            if dep not in seen:
                seen[dep] = m
                todo.append(dep)
    return seen


def chain(seen: dict[str, str], end: str) -> str:
    path = [end]
    while seen[path[-1]]:
        path.append(seen[path[-1]])
    return " ← ".join(path)


def modules_of(package: str) -> list[str]:
    return sorted(module_name(p) for p in (ROOT / package).rglob("*.py"))


ANALYSIS = modules_of("analysis")
VIZ = modules_of("viz")


def test_the_check_finds_the_modules_and_their_imports():
    """Not vacuous: the packages exist, and the parser sees imports that are there (lazy ones included)."""
    assert len(ANALYSIS) >= 15 and "attnlab.analysis.structured_fit" in ANALYSIS and "attnlab.analysis.capture" in ANALYSIS
    assert len(VIZ) >= 4 and "attnlab.viz.report" in VIZ
    assert "attnlab.support" in direct_imports(module_path("attnlab.analysis.structured_fit"))
    assert "attnlab.train.checkpoint" in direct_imports(module_path("attnlab.workflows.capture_run"))  # a lazy import
    assert "attnlab.experiment.attention" in direct_imports(module_path("attnlab.experiment.report"))
    assert "attnlab.llm.models.loading" in direct_imports(module_path("attnlab.llm.heads.hf_capture"))  # a lazy import
    assert "attnlab.analysis.capture" in direct_imports(module_path("attnlab.llm.heads.hf_capture"))
    seen = reachable("attnlab.experiment.pipeline")
    assert "attnlab.train.loop" in seen and "attnlab.viz.report" in seen  # followed through other modules


@pytest.mark.parametrize("module", ANALYSIS)
def test_analysis_imports_neither_train_nor_data_nor_experiment(module):
    """analysis/ is functions of attention matrices: no training, corpus, experiment, workflow, CLI — and no LLM
    loading (the capture of a HF model is ``llm.heads.hf_capture``, which imports analysis, not the reverse)."""
    seen = reachable(module)
    bad = [m for m in seen if m.split(".")[1] in ("train", "data", "experiment", "workflows", "cli", "llm")]
    assert not bad, "; ".join(chain(seen, m) for m in bad)


@pytest.mark.parametrize("module", VIZ)
def test_viz_does_not_import_the_experiment(module):
    seen = reachable(module)
    bad = [m for m in seen if m.split(".")[1] in ("experiment", "workflows", "cli")]
    assert not bad, "; ".join(chain(seen, m) for m in bad)


EXECUTION = modules_of("llm/execution")
METHODS = modules_of("llm/methods")


def test_the_llm_sub_packages_are_found():
    assert "attnlab.llm.execution.backend" in EXECUTION and "attnlab.llm.execution.cpu_backend" in EXECUTION
    assert "attnlab.llm.methods.quest_runner" in METHODS
    assert "attnlab.llm.execution.attention" in direct_imports(module_path("attnlab.llm.methods.quest_runner"))


@pytest.mark.parametrize("module", EXECUTION)
def test_execution_imports_neither_methods_nor_eval(module):
    """execution/ runs a plan (the seam, its backends, the cache): it knows no method and no evaluation."""
    seen = reachable(module)
    bad = [m for m in seen if m.startswith(("attnlab.llm.methods", "attnlab.llm.eval", "attnlab.cli", "attnlab.workflows"))]
    assert not bad, "; ".join(chain(seen, m) for m in bad)


def test_the_plan_record_does_not_import_its_execution():
    """plans.plan is the record (what each head reads); how it runs is execution's, which reads the record."""
    seen = reachable("attnlab.llm.plans.plan")
    bad = [m for m in seen if m.startswith(("attnlab.llm.execution", "attnlab.llm.methods", "attnlab.llm.eval"))]
    assert not bad, "; ".join(chain(seen, m) for m in bad)


@pytest.mark.parametrize("module", METHODS)
def test_methods_do_not_import_the_eval(module):
    """A method changes attention (a plan, a runner class); the eval grid runs methods, not the reverse."""
    seen = reachable(module)
    bad = [m for m in seen if m.startswith(("attnlab.llm.eval", "attnlab.cli", "attnlab.workflows"))]
    assert not bad, "; ".join(chain(seen, m) for m in bad)
