"""The docs name only what exists: README.md and docs/*.md are checked for
the paths, commands and options they name, and for what belongs in
docs/measurements.md alone.

What is checked, in each document:

- **Code** is an inline code span (`...`) or a line of a fenced block
  (```...```). Indented code blocks are not read: write commands fenced.
- **Paths.** A path is a whitespace-separated token of code, or the target of a
  markdown link ``[text](target)``, after trimming quotes, brackets and
  trailing punctuation, an ``OPTION=`` / ``VAR=`` prefix, a pytest node id
  (``::name``, checked below), a test id (``[param]``) and a source locator
  (``:LINE``, ``:LINE-LINE``). URLs (``scheme://``, ``mailto:``) and anchors
  (``#...``) are skipped, and so is any token holding a placeholder or a
  variable (``< > $ ~ { } |``), an elision (``...``) or an absolute path.
  What is left counts as a path when it is made of ``[A-Za-z0-9_.-/*]`` and
  either holds a ``/`` and (ends with ``/``, or ends in a file extension of
  ``EXTENSIONS``, or starts with a top-level entry of the repository or
  ``cudnn``), or has no ``/`` and ends in a file extension of ``EXTENSIONS``
  (a bare file name).
  - A path with a ``/`` resolves against the repository root; one starting
    ``cudnn/`` against the installed ``cudnn`` package's parent directory; a
    link target against its document's directory (as markdown renders it).
    A path with ``*`` must match at least one file (a glob); every other path
    must exist.
  - A bare file name must be the name of a file in the repository or in the
    installed ``cudnn`` package, or one a run writes (``GENERATED``). A bare
    glob (``*-min.json``) is not checked.
  - Paths under a directory a run writes (``sdpa-report/``) are not checked.
  - ``path::name`` (a pytest node id): the file defines ``name``.
- **Commands.** In code, ``sdpa-conformance WORD`` names a subcommand of the
  CLI's parser (``conformance.cli.parser``); ``python3 -m MODULE`` names an
  importable module.
- **Options.** Every ``--option`` (code and prose) exists where it is used.
  In code, the command before it decides: after ``sdpa-conformance SUB`` the
  subcommand's parser; after ``python -m conformance.kill_rate`` the kill
  harness's; after ``tools/NAME.py`` that tool's ``add_argument`` calls; after
  ``pytest`` (or the gate's ``--``) pytest's ``--help`` (the suite's plugin,
  pytest, xdist, Hypothesis, pytest-timeout); after a foreign command (git,
  pip, nvidia-smi, ...) nothing is checked. Elsewhere the option must exist in
  one of those, or be an option of the kernels' own code that the docs quote
  (``KERNEL_OPTIONS``).
- **Environment variables.** Every ``SDPA_*`` name appears in the suite's
  Python sources.
- **Measurements.** Dates (``YYYY-MM-DD``) appear in docs/measurements.md
  only; no document speaks of work periods, ticket numbers or how a GPU was
  reached.

``test_the_checker_reports_what_does_not_exist`` plants a document with a bad
path, link, subcommand, option, module and variable and checks each is
reported (and that the good ones beside them are not).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, FrozenSet, Iterator, List, Optional, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MEASUREMENTS = ROOT / "docs" / "measurements.md"

EXTENSIONS = frozenset({".py", ".md", ".toml", ".json", ".jsonl", ".yml", ".yaml", ".sh", ".txt", ".xml", ".html", ".cfg", ".ini", ".log", ".csv", ".ptx"})
# Written by a run or a tool, not in the tree: bare names, and directories whose contents are not checked.
GENERATED = frozenset({"report.json", "report.md", "report.html", "mutants.json", "mutants.md", "mutants.partial.json", "calibration.json", "junit.xml"})
GENERATED_DIRS = frozenset({"sdpa-report"})
SKIPPED_DIRS = frozenset({".git", "__pycache__", ".hypothesis", ".pytest_cache", "sdpa-report", "build", ".gpu"})
# Commands whose options are their own business.
FOREIGN = frozenset(
    {
        "git",
        "pip",
        "pip3",
        "nvidia-smi",
        "env",
        "bash",
        "compute-sanitizer",
        "lint-imports",
        "mktemp",
        "cat",
        "grep",
        "python3.11",
        "venv",
        "actions/checkout@v4",
    }
)
# Options of the kernels' own code that the docs quote (the CuTe DSL compile's target).
KERNEL_OPTIONS = frozenset({"--gpu-arch"})
PLACEHOLDER = set("<>$~{}|")
TIDY = "()[]'\",;`"
DIARY = re.compile(
    r"\b(?:session|issue)s?\s+#?\d+|\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|"
    r"this|that|next|last|previous|earlier)\s+session\b|\blent\s+GPU|\bdevice\s+calls?\b|\bissue\s+#\d+",
    re.I,
)
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


# ------------------------------------------------------------------ what exists
def _cudnn_parent() -> Optional[Path]:
    spec = importlib.util.find_spec("cudnn")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]).parent


CUDNN_PARENT = _cudnn_parent()


def _walk(top: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if d not in SKIPPED_DIRS and not d.endswith(".egg-info")]
        for f in filenames:
            yield Path(dirpath) / f


@functools.lru_cache(maxsize=None)
def file_names() -> FrozenSet[str]:
    names = {p.name for p in _walk(ROOT)}
    if CUDNN_PARENT is not None:
        names |= {p.name for p in _walk(CUDNN_PARENT / "cudnn")}
    return frozenset(names)


@functools.lru_cache(maxsize=None)
def top_level() -> FrozenSet[str]:
    return frozenset(p.name for p in ROOT.iterdir()) | {"cudnn"}


@functools.lru_cache(maxsize=None)
def cli_options() -> Dict[str, FrozenSet[str]]:
    """Subcommand -> its options (top-level ones included); '' -> the top level's."""
    import argparse

    from conformance.cli import parser

    def opts(p: argparse.ArgumentParser) -> Set[str]:
        return {s for a in p._actions for s in a.option_strings if s.startswith("--")}

    top = parser()
    out = {"": frozenset(opts(top))}
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[name] = frozenset(opts(sub) | out[""])
    return out


@functools.lru_cache(maxsize=None)
def kill_rate_options() -> FrozenSet[str]:
    from conformance.kill.cli import parser

    return frozenset(s for a in parser()._actions for s in a.option_strings if s.startswith("--"))


@functools.lru_cache(maxsize=None)
def pytest_options() -> FrozenSet[str]:
    """Every long option `python -m pytest --help` lists: the suite's plugin, pytest and its plugins."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
    text = subprocess.run([sys.executable, "-m", "pytest", "--help"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300).stdout
    found = frozenset(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", text))
    assert "--hypothesis-profile" in found and "--sdpa-timeout" in found, "pytest --help lost its plugins:\n" + text[-2000:]
    return found


@functools.lru_cache(maxsize=None)
def tool_options(tool: Path) -> FrozenSet[str]:
    """The --options of a script's add_argument calls (read, not run: tools may need a GPU)."""
    found = set()
    for node in ast.walk(ast.parse(tool.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            found |= {a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")}
    return frozenset(found | {"--help"})


@functools.lru_cache(maxsize=None)
def all_options() -> FrozenSet[str]:
    tools = frozenset().union(*(tool_options(t) for t in (ROOT / "tools").glob("*.py")))
    return frozenset().union(*cli_options().values(), kill_rate_options(), pytest_options(), tools, KERNEL_OPTIONS)


@functools.lru_cache(maxsize=None)
def source_text() -> str:
    this = Path(__file__).resolve()  # names planted variables
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in _walk(ROOT) if p.suffix == ".py" and p.resolve() != this)


# ------------------------------------------------------------------ reading a document
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
INLINE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
OPTION = re.compile(r"^--[a-z][a-z0-9-]*")
PROSE_OPTION = re.compile(r"(?<![\w`/-])(--[a-z][a-z0-9-]*)")


def split_code(text: str) -> Tuple[List[str], str]:
    """(code segments: fenced lines and inline spans, the prose left over)."""
    code: List[str] = []
    for block in FENCE.findall(text):
        code += [line for line in block.splitlines() if line.strip()]
    prose = FENCE.sub("", text)
    code += INLINE.findall(prose)
    return code, INLINE.sub(" ", prose)


def _path_of(token: str) -> Optional[Tuple[str, Optional[str]]]:
    """(the path a token names, the pytest node name after ::) or None when it names none."""
    t = token.strip(TIDY)
    if re.match(r"^[A-Za-z_][\w-]*=", t):  # OPTION=value, VAR=value: the value
        t = t.split("=", 1)[1].strip(TIDY)
    if "://" in t or t.startswith(("#", "mailto:")) or "..." in t or PLACEHOLDER & set(t) or t.startswith("/"):
        return None
    node = None
    if "::" in t:
        t, node = t.split("::", 1)
        node = re.split(r"[\[:(]", node)[0] or None
    t = re.sub(r"\[[^\]]*\]$", "", t)  # a test id
    t = re.sub(r":\d[\d, -]*$", "", t)  # a source locator
    t = t.rstrip(".,:;")
    if not t or not re.fullmatch(r"[\w.*/-]+", t) or "//" in t:
        return None
    if "/" in t:
        first, last = t.split("/", 1)[0], t.rstrip("/").rsplit("/", 1)[-1]
        if t.endswith("/") or Path(last).suffix in EXTENSIONS or first in top_level():
            return t, node
        return None
    return (t, node) if Path(t).suffix in EXTENSIONS else None


def _resolve(path: str, base: Path, *, link: bool = False) -> Optional[str]:
    """None when the path exists, else what is wrong."""
    first = path.split("/", 1)[0]
    if first in GENERATED_DIRS:
        return None
    if "/" not in path and not link:
        if "*" in path or path in GENERATED or path in file_names():
            return None
        return "no file of that name in the repository or the cudnn package"
    if first == "cudnn":
        if CUDNN_PARENT is None:
            return "the cudnn package is not installed"
        base = CUDNN_PARENT
    if "*" in path:
        return None if any(base.glob(path.rstrip("/"))) else "the glob matches nothing"
    return None if (base / path).exists() else "does not exist"


def _defines(path: Path, name: str) -> bool:
    return (
        re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b|^{re.escape(name)}\s*=", path.read_text(encoding="utf-8", errors="replace"), re.M)
        is not None
    )


def _option_context(tokens: List[str], i: int, ctx: Optional[str]) -> Tuple[Optional[str], Optional[str]]:
    """(the context the token at i starts, a problem) for command words; ctx unchanged otherwise."""
    t = tokens[i].strip(TIDY)
    subs = cli_options()
    if t == "sdpa-conformance":
        nxt = tokens[i + 1].strip(TIDY) if i + 1 < len(tokens) else ""
        if not nxt or nxt.startswith("-"):
            return "", None
        if nxt not in subs or nxt == "":
            return None, f"`sdpa-conformance {nxt}`: no such subcommand (the CLI has {', '.join(sorted(s for s in subs if s))})"
        return nxt, None
    if t.endswith("conformance.kill_rate"):
        return "kill_rate", None
    if re.fullmatch(r"tools/[\w-]+\.py", t):
        return "tool:" + t, None
    if t == "pytest" or t.endswith("/pytest"):
        return "pytest", None
    if t == "--":
        return "pytest", None
    if t in FOREIGN or (i == 0 and t in {"python", "python3"} and len(tokens) > 2 and tokens[1] == "-m" and tokens[2] in FOREIGN):
        return "foreign", None
    return ctx, None


def _allowed(ctx: Optional[str]) -> Optional[FrozenSet[str]]:
    if ctx is None:
        return all_options()
    if ctx == "foreign":
        return None
    if ctx == "pytest":
        return pytest_options()
    if ctx == "kill_rate":
        return kill_rate_options()
    if ctx.startswith("tool:"):
        tool = ROOT / ctx[len("tool:") :]
        return tool_options(tool) if tool.exists() else None  # the path check reports a missing tool
    return cli_options()[ctx]


def _context_name(ctx: Optional[str]) -> str:
    if ctx is None:
        return "any of the suite's parsers or pytest's --help"
    if ctx == "pytest":
        return "pytest --help"
    if ctx == "kill_rate":
        return "python -m conformance.kill_rate"
    if ctx.startswith("tool:"):
        return ctx[len("tool:") :]
    return f"sdpa-conformance {ctx}".rstrip()


def problems(text: str, doc_dir: Path, *, measurements: bool = False) -> List[str]:
    """What `text` (a document living in `doc_dir`) names that does not exist."""
    found: List[str] = []
    code, prose = split_code(text)

    def path_problem(target: Tuple[str, Optional[str]], base: Path, how: str) -> None:
        path, node = target
        why = _resolve(path, base, link=how == "link")
        if why:
            found.append(f"{how} `{path}`: {why}")
        elif node and "*" not in path and "/" in path:
            where = (CUDNN_PARENT if path.startswith("cudnn/") else base) / path
            if where.is_file() and not _defines(where, node):
                found.append(f"`{path}::{node}`: {path} defines no `{node}`")

    for target in LINK.findall(prose):
        got = _path_of(target.split("#", 1)[0]) if not target.startswith("#") else None
        if got:
            path_problem(got, doc_dir, "link")

    for segment in code:
        tokens = segment.split()
        ctx: Optional[str] = None
        for i, token in enumerate(tokens):
            ctx, problem = _option_context(tokens, i, ctx)
            if problem:
                found.append(problem)
            bare = token.strip(TIDY)
            m = OPTION.match(bare)
            if m:
                allowed = _allowed(ctx)
                if allowed is not None and m.group(0) not in allowed:
                    found.append(f"option `{m.group(0)}`: not an option of {_context_name(ctx)}")
                continue
            if tokens[i - 1 : i] and tokens[i - 1] in ("-m",) and i >= 2 and tokens[i - 2].startswith("python"):
                if importlib.util.find_spec(bare.split()[0]) is None:
                    found.append(f"`python -m {bare}`: no such module")
                continue
            got = _path_of(token)
            if got:
                path_problem(got, ROOT, "path")

    all_opts = all_options()
    for opt in PROSE_OPTION.findall(prose):
        if opt not in all_opts:
            found.append(f"option {opt} (prose): not an option of any of the suite's parsers or pytest's --help")

    sources = source_text()
    for var in sorted(set(re.findall(r"\bSDPA_[A-Z0-9_]+\b", text))):
        if not re.search(rf"\b{var}\b", sources):
            found.append(f"environment variable {var}: no Python source of the suite reads it")

    for m in DIARY.finditer(text):
        found.append(f"diary, not reference: {m.group(0)!r}")
    if not measurements:
        for m in sorted(set(DATE.findall(text))):
            found.append(f"a date ({m}): dated measurements belong in docs/measurements.md")
    return found


# ------------------------------------------------------------------ the tests
@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_docs_name_only_what_exists(doc):
    got = problems(doc.read_text(encoding="utf-8"), doc.parent, measurements=doc == MEASUREMENTS)
    assert not got, f"{doc.relative_to(ROOT)}:\n  " + "\n  ".join(got)


def test_measurements_have_one_home():
    assert MEASUREMENTS.exists()
    text = MEASUREMENTS.read_text(encoding="utf-8")
    # Every dated heading names its commit (or says it was not recorded).
    for heading in re.findall(r"^#+ .*$", text, re.M):
        if DATE.search(heading):
            assert re.search(r"commit [0-9a-f]{7}|commit not recorded", heading), heading


def test_the_checker_reports_what_does_not_exist(tmp_path):
    planted = tmp_path / "planted.md"
    planted.write_text(
        "# Planted\n\n"
        "Run `tools/gpu_gate.sh 3` (a deleted script) or `bash tools/gpu_backward.sh`; the judge is\n"
        "`conformance/judge.py`, see [the model](no_such_doc.md) and `tests/test_docs.py::no_such_test`.\n\n"
        "```\n"
        "sdpa-conformance gates --runs 3\n"
        "sdpa-conformance gate --hypothesis-profile=ci\n"
        "python3 -m pytest -n auto --no-such-option\n"
        "python3 -m conformance.no_such_module\n"
        "python -m conformance.kill_rate --shrink-s 5\n"
        "```\n\n"
        "The variable SDPA_NO_SUCH_VARIABLE, the option --starved, 2026-12-03, the seventh " + "session.\n\n"
        # The good ones beside them: none of these may be reported.
        "Good: `ground/tolerances.py`, `cudnn/sdpa/fwd/kernels/sm80/prefill_f16.py:1405-1408`, `prefill_f16.py`,\n"
        "`findings/*.json`, `sdpa-report/cases/numerics-05b6e49ea8.json`, `report.json`, [links](../README.md),\n"
        "`tests/test_docs.py::test_the_checker_reports_what_does_not_exist`, `ground.data.make_inputs`, `H/H_kv`,\n"
        "`--budget-s`, `SDPA_ADAPTER`, `git show --stat`.\n\n"
        "```\n"
        "sdpa-conformance gate --runs 3 --cold --adapter wrapper --sm80-compat --junitxml junit.xml -- --kernels-source=x\n"
        "python3 -m pytest -n auto --hypothesis-profile=ci\n"
        "python3 tools/calibrate_error_model.py --emulate tc24 --per-stratum 6\n"
        "```\n",
        encoding="utf-8",
    )
    got = problems(planted.read_text(encoding="utf-8"), ROOT / "docs")
    text = "\n".join(got)
    for bad in (
        "`tools/gpu_gate.sh`",
        "`tools/gpu_backward.sh`",
        "`conformance/judge.py`",
        "`no_such_doc.md`",
        "no `no_such_test`",
        "`sdpa-conformance gates`",
        "`--hypothesis-profile`: not an option of sdpa-conformance gate",
        "`--no-such-option`",
        "conformance.no_such_module",
        "`--shrink-s`",
        "SDPA_NO_SUCH_VARIABLE",
        "--starved",
        "2026-12-03",
        "seventh " + "session",
    ):
        assert bad in text, f"not reported: {bad}\n{text}"
    assert len(got) == 14, text  # and nothing good was reported


SOURCES = [
    p
    for pattern in ("*.py", "*.toml", "*.yml", "*.md", "*.sh")
    for p in sorted(ROOT.rglob(pattern))
    if not any(part.startswith(".") or part == "sdpa-report" for part in p.relative_to(ROOT).parts[:-1]) and p != Path(__file__).resolve()
]


def test_the_code_speaks_of_itself_only():
    """Code, comments, findings and workflows name no ticket or work-period numbers
    (the same words as the docs check; this file plants them, so it is left out)."""
    found = [f"{p.relative_to(ROOT)}: {m.group(0)!r}" for p in SOURCES for m in DIARY.finditer(p.read_text(encoding="utf-8", errors="replace"))]
    assert len(SOURCES) > 100 and not found, "\n".join(found)
