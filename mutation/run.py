"""Mutation testing of coddl's core with mutmut: ``make mutation [MODULE=src/coddl/policies/srtf.py]``.

Why mutmut 3: it forks every mutant from a process that has already imported numpy, numba, torch
and the test modules, switches mutants on per function at call time (no re-import, no re-JIT of
untouched code), and runs each mutant against only the tests that called the mutated function when
the selection was traced, fastest first, stopping at the first failure. On two cores that is a few
mutants per second; a tool that starts a fresh interpreter per mutant pays seconds of imports each.
Its limits, which the scores below inherit: it does not mutate code outside functions (module
constants, class attributes such as a policy's ``Params`` defaults and presets) nor decorated
functions (``@property``, ``@cached_property``, the ``numba.njit`` kernels of
``policies/tournament.py``, which ``test_tournament_equivalence.py`` checks against a plain-Python
transcription instead).

For each module this driver prepares a working folder per test selection (``modules.toml``), runs
``mutmut run '<module>.*'`` there (every mutant of the module re-tested, so the score reflects the
current tests), reads mutmut's per-file results, sets aside the mutants listed in
``equivalent.toml`` (matched by module, function and the changed lines, so renumbering does not
unlist them) and prints the score: killed ÷ (mutants − equivalent). Survivors are written with
their diffs to ``.mutation/survivors-<module>.txt``; scores to ``.mutation/scores.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "mutation"
WORK = ROOT / ".mutation"
BIN = Path(sys.executable).parent
console = Console(width=140)

# mutmut's exit codes per mutant: the test run failed (killed), passed (survived), no test reached
# the function, ran out of time (an endless loop: caught), crashed (caught)
KILLED = {1, 3, 36, 24, -24, 152, 255, -11, -9, -6, 37}  # -6: aborted (gloo on a mismatched buffer)
SURVIVED = {0}
NO_TESTS = {33, 5}


@dataclass
class Score:
    module: str
    mutants: int = 0
    killed: int = 0
    survived: int = 0
    no_tests: int = 0
    equivalent: int = 0
    other: int = 0
    seconds: float = 0.0
    survivors: list[str] = field(default_factory=list)

    @property
    def percent(self) -> float:
        counted = self.mutants - self.equivalent
        return 100.0 * self.killed / counted if counted else 100.0


def dotted(path: str) -> str:
    return path.removeprefix("src/").removesuffix(".py").replace("/", ".")


def expand(paths: list[str]) -> list[str]:
    """Files named, and every .py file with a function in the folders named."""
    out = []
    for p in paths:
        q = ROOT / p
        files = sorted(q.rglob("*.py")) if q.is_dir() else [q]
        for f in files:
            if f.is_file() and "def " in f.read_text():
                out.append(str(f.relative_to(ROOT)))
    return out


def selection(module: str, tests: dict[str, list[str]]) -> list[str]:
    best = max((p for p in tests if module.startswith(p)), key=len, default=None)
    if best is None:
        raise SystemExit(f"mutation/modules.toml: no [tests] entry covers {module}")
    return tests[best]


def workdir(args: list[str], modules: list[str]) -> Path:
    """The working folder of one test selection: the source and tests linked, pyproject.toml with
    the [tool.mutmut] section for that selection."""
    name = hashlib.sha256(json.dumps(args).encode()).hexdigest()[:10]
    d = WORK / name
    d.mkdir(parents=True, exist_ok=True)
    # examples/ too: tests/runtime's helpers (runtime_live, imported by its conftest) look at it on import
    for link in ("src", "tests", "examples"):
        if not (d / link).exists():
            (d / link).symlink_to(ROOT / link)
    base = (ROOT / "pyproject.toml").read_text()
    cfg = {
        "source_paths": ["src/coddl"],
        "only_mutate": modules,
        "also_copy": ["examples"],
        "pytest_add_cli_args_test_selection": [*args, "-m", "not slow"],
        "pytest_add_cli_args": ["-p", "no:cacheprovider", "-q"],
        "process_isolation": "forkserver",
        "timeout_multiplier": 3.0,
        "timeout_constant": 2.0,
    }
    lines = ["", "[tool.mutmut]"] + [f"{k} = {json.dumps(v)}" for k, v in cfg.items()]
    text = base + "\n".join(lines) + "\n"
    if not (d / "pyproject.toml").exists() or (d / "pyproject.toml").read_text() != text:
        # another set of modules (or settings) for this selection: mutmut's copies and its record
        # of which test calls which function were made for the old one and would score the new
        # modules 0/0, then "untested"; start its state afresh (the tracing run is paid again)
        shutil.rmtree(d / "mutants", ignore_errors=True)
        (d / "pyproject.toml").write_text(text)
    return d


def load_equivalents() -> list[dict]:
    data = tomllib.loads((HERE / "equivalent.toml").read_text())
    return data.get("mutant", [])


def changed_lines(diff: str) -> list[str]:
    """The diff's removed and added lines, whitespace-normalised (a blank line is neither: ``"" in
    "+-"`` is true, which made every entry with a blank line in its diff match nothing)."""
    return [" ".join(line.split()) for line in diff.splitlines()
            if line[:1] in ("+", "-") and not line.startswith(("+++", "---"))]


def function_of(mutant: str, module: str) -> str:
    """``coddl.policies.srtf.xǁSrtfǁallocate__mutmut_5`` → ``Srtf.allocate``."""
    name = mutant.removeprefix(dotted(module) + ".").rsplit("__mutmut_", 1)[0]
    return name.removeprefix("x_").removeprefix("xǁ").replace("ǁ", ".")


def is_equivalent(module: str, func: str, lines: list[str], equivalents: list[dict]) -> bool:
    for e in equivalents:
        if e["module"] == module and e["function"] == func and changed_lines(e["diff"]) == lines:
            return True
    return False


def run_module(module: str, tests: dict[str, list[str]], all_modules: list[str], equivalents: list[dict]) -> Score:
    args = selection(module, tests)
    group = [m for m in all_modules if selection(m, tests) == args]
    d = workdir(args, group)
    log = WORK / f"log-{dotted(module)}.txt"
    started = time.perf_counter()
    env = dict(os.environ, NUMBA_CACHE_DIR=str(d / "numba-cache"))
    with console.status(f"mutmut: {module} (log: {log.relative_to(ROOT)})"), open(log, "w") as out:
        proc = subprocess.run([str(BIN / "mutmut"), "run", f"{dotted(module)}.*"], cwd=d, stdout=out,
                              stderr=subprocess.STDOUT, env=env)
    score = Score(module, seconds=time.perf_counter() - started)
    meta = d / "mutants" / (module + ".meta")
    if proc.returncode != 0 or not meta.exists():
        console.print(f"[red]{module}: mutmut failed (exit {proc.returncode}); see {log}[/red]")
        score.other = -1
        return score
    codes = json.loads(meta.read_text())["exit_code_by_key"]
    sys.path.insert(0, str(d))
    cwd = os.getcwd()
    os.chdir(d)
    try:
        from mutmut.mutation.diff_apply import get_diff_for_mutant
        report = []
        for name, code in sorted(codes.items(), key=lambda kv: int(kv[0].rsplit("_", 1)[1])):
            score.mutants += 1
            if code in KILLED:
                score.killed += 1
                continue
            diff = get_diff_for_mutant(name, path=module)
            func = function_of(name, module)
            if is_equivalent(module, func, changed_lines(diff), equivalents):
                score.equivalent += 1
                continue
            if code in SURVIVED:
                score.survived += 1
            elif code in NO_TESTS:
                score.no_tests += 1
            else:
                score.other += 1
            score.survivors.append(name)
            status = "survived" if code in SURVIVED else "no tests" if code in NO_TESTS else f"exit {code}"
            report.append(f"# {name} ({func}): {status}\n{diff}\n")
    finally:
        os.chdir(cwd)
    (WORK / f"survivors-{dotted(module)}.txt").write_text("\n".join(report))
    return score


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("modules", nargs="*", help="files or folders under src/ (default: modules.toml)")
    ap.add_argument("--fresh", action="store_true", help="forget mutmut's traced tests and results first")
    a = ap.parse_args()
    cfg = tomllib.loads((HERE / "modules.toml").read_text())
    all_modules = expand(cfg["modules"])
    chosen = expand(a.modules) if a.modules else all_modules
    unknown = [m for m in chosen if m not in all_modules]
    if unknown:
        raise SystemExit(f"not a module mutation/modules.toml lists: {', '.join(unknown)}")
    if a.fresh and WORK.exists():
        shutil.rmtree(WORK)
    WORK.mkdir(exist_ok=True)
    equivalents = load_equivalents()
    scores_path = WORK / "scores.json"
    saved = json.loads(scores_path.read_text()) if scores_path.exists() else {}
    scores = []
    for m in chosen:
        s = run_module(m, cfg["tests"], all_modules, equivalents)
        scores.append(s)
        saved[m] = {k: v for k, v in asdict(s).items() if k != "survivors"} | {"percent": round(s.percent, 1)}
        scores_path.write_text(json.dumps(saved, indent=1, sort_keys=True))
        console.print(f"{m}: {s.killed}/{s.mutants - s.equivalent} killed ({s.percent:.1f}%), "
                      f"{s.survived} survived, {s.no_tests} untested, {s.equivalent} equivalent, {s.seconds:.0f} s")
    table = Table("module", "mutants", "equivalent", "killed", "survived", "no test", "score")
    for s in scores:
        goal = 90.0 if "/policies/" in s.module else 85.0
        colour = "green" if s.percent >= goal else "red"
        table.add_row(s.module, str(s.mutants), str(s.equivalent), str(s.killed), str(s.survived),
                      str(s.no_tests), f"[{colour}]{s.percent:.1f}%[/{colour}]")
    console.print(table)
    console.print(f"survivors with their diffs: {WORK.relative_to(ROOT)}/survivors-<module>.txt")


if __name__ == "__main__":
    main()
