"""The package's shape: imports only downward (values first), no package importing one that imports it
back, an engine that loads no parser, a bench that imports no test, no class or function past its size
limit, docstrings that name only files that exist, a README short enough to read, tests that mirror
the package (a test file for each module of 50 lines or more, named after it, none named for a review),
no module named for a vague role, and fetch attempts built from one context object.

The import checks walk the source with ``ast``, so imports under TYPE_CHECKING and
inside functions count as much as those at the top of a module.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ROOT = REPO / "bake"
MAX_CLASS_LINES = 250
MAX_FUNCTION_LINES = 60
MAX_README_LINES = 250

# bake/ from the bottom up: a module may import only modules listed before it. The flow
# reads top to bottom: values -> manifest -> fetch -> index, seal, verify -> the commands -> the CLI.
LAYERS = {
    "values, importing nothing of bake's but errors (and control_chars' escaping)": [
        "bake",
        "bake.errors",
        "bake.byte_sizes",
        "bake.control_chars",
        "bake.urls",
        "bake.paths",
        "bake.hub",
        "bake.hub.entry",
        "bake.asset",
    ],
    "shared mechanisms": [
        "bake.hashes",
        "bake.exit_status",
        "bake.cosign",
        "bake.atomic",
        "bake.tomlkeys",
        "bake.reference",
        "bake.servefile",
        "bake.offline",
        "bake.attestation",
    ],
    "the Hub's table and cache layout": ["bake.hub.schema", "bake.hub.layout", "bake.hub.scan"],
    "the manifest and the consumer table": [
        "bake.locations",
        "bake.consumers.libraries",
        "bake.consumers.vllm_assets",
        "bake.consumers.naming",
        "bake.consumers.serve",
        "bake.consumers.entries",
        "bake.consumers.checks",
        "bake.consumers",
        "bake.manifest",
    ],
    "the cache and the fetch engine": [
        "bake.cache",
        "bake.fetch.options",
        "bake.fetch.failures",
        "bake.fetch.segments",
        "bake.fetch.clock",
        "bake.fetch.retry",
        "bake.fetch.sources",
        "bake.fetch.transport",
        "bake.fetch.session",
        "bake.fetch.partial",
        "bake.fetch.transfer",
        "bake.fetch.attempt",
        "bake.fetch.local",
        "bake.fetch.hub_download_client",
        "bake.fetch.hub_download",
        "bake.fetch.install",
        "bake.fetch.progress",
        "bake.fetch.job",
        "bake.fetch",
    ],
    "the destination: its index, the seal, verification": ["bake.index", "bake.seal", "bake.verify"],
    "the JSON report of fetch, verify, doctor and harvest --diff": ["bake.report"],
    "the commands: editing a manifest (bake add, a file or a Hub repository)": [
        "bake.manifestedit",
        "bake.add",
        "bake.add.hub_api",
        "bake.add.hub_repo",
    ],
    "the commands: the checked build": [
        "bake.context.git",
        "bake.context.dockerignore",
        "bake.context.check",
        "bake.context.export",
        "bake.context",
        "bake.registry",
        "bake.layers",
        "bake.served",
        "bake.assets_image",
        "bake.dockerfile",
        "bake.pin",
        "bake.publish",
        "bake.signing",
        "bake.build",
    ],
    "the commands: image assertions": [
        "bake.testing",
        "bake.testing.image",
        "bake.testing.local",
        "bake.testing.layers",
        "bake.testing.probes",
        "bake.testing.serve",
        "bake.testing.plugin",
        "bake.testing.test_image",
        "bake.signed_image",
    ],
    "the commands: harvesting a job's caches": [
        "bake.harvest",
        "bake.harvest.caches",
        "bake.harvest.pin",
        "bake.harvest.diff",
        "bake.harvest.command",
    ],
    "the commands: seeding node storage at job start (bake-entrypoint runs it)": [
        "bake.seed",
        "bake.seed.nodefs",
        "bake.seed.plan",
        "bake.seed.liveness",
        "bake.seed.right",
        "bake.seed.copier",
        "bake.seed.stamp",
        "bake.seed.checks",
        "bake.seed.view",
        "bake.seed.seeder",
        "bake.seed.command",
    ],
    "the commands without a package of their own: each its parser, handler and exit codes": [
        "bake.usage",
        "bake.commands",
        "bake.commands.options",
        "bake.commands.findings",
        "bake.commands.fetch",
        "bake.commands.verify",
        "bake.commands.manifest",
        "bake.commands.doctor",
        "bake.commands.seal",
        "bake.commands.add",
        "bake.commands.check_context",
        "bake.commands.build",
        "bake.commands.publish",
        "bake.commands.pin",
        "bake.commands.cache",
        "bake.commands.completion",
    ],
    "the command line, assembling the commands": ["bake.cli", "bake.__main__"],
}
ORDER = [module for layer in LAYERS.values() for module in layer]


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent)
        if rel.parts[1] == "_vendor":
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The bake modules ``name`` imports anywhere in its source.

    ``from bake.fetch import options`` names the submodule; ``from bake.fetch import X`` for anything
    else names the package. A submodule does not count as importing its package (as import-linter).
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": set()}, []),
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ],
)
def test_cycle_finder(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert _cycles(graph) == expected


def test_the_walk_sees_type_checking_and_function_local_imports() -> None:
    # fetch's command imports the fetch package only inside a function; progress imports options only
    # for typing.
    assert "bake.fetch" in GRAPH["bake.commands.fetch"]
    assert "bake.fetch.options" in GRAPH["bake.fetch.progress"]


def test_no_module_under_bake_imports_one_that_imports_it_back() -> None:
    assert _cycles(GRAPH) == []


# A package is one room: its modules may import each other, but no room imports one that imports it back.
ROOMS = (
    "bake.fetch",
    "bake.hub",
    "bake.consumers",
    "bake.testing",
    "bake.add",
    "bake.harvest",
    "bake.context",
    "bake.commands",
)


def _room(module: str) -> str:
    return next((room for room in ROOMS if module == room or module.startswith(room + ".")), module)


def _room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    rooms: dict[str, set[str]] = {}
    for module, imports in graph.items():
        rooms.setdefault(_room(module), set()).update(_room(m) for m in imports if _room(m) != _room(module))
    for imports in list(rooms.values()):
        for room in imports:
            rooms.setdefault(room, set())
    return rooms


def test_a_package_counts_as_one_room() -> None:
    graph = {"bake.fetch.job": {"bake.hub.entry"}, "bake.hub.schema": {"bake.fetch"}, "bake.fetch": set()}
    assert _cycles(_room_graph(graph)) == [["bake.fetch", "bake.hub"]]


def test_no_room_imports_one_that_imports_it_back() -> None:
    assert _cycles(_room_graph(GRAPH)) == []


# What `import bake.fetch` must not load: the engine takes values and errors, never the parser,
# the consumer table, bake.serve's format or the Hub's code.
NOT_IN_THE_ENGINE = (
    "bake.manifest",
    "bake.consumers",
    "bake.locations",
    "bake.servefile",
    "bake.hub",
    "bake.add",
    "bake.fetch.hub_download",
    "huggingface_hub",
)


def test_importing_the_fetch_engine_loads_no_parser_consumer_table_or_hub() -> None:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import bake.fetch"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=True,
    )
    # "import time: self [us] | cumulative | imported package", one line a module, nested by indent.
    loaded = {line.rpartition("|")[2].strip() for line in proc.stderr.splitlines() if "|" in line}
    assert {"bake.fetch", "bake.asset", "bake.urls"} <= loaded
    assert sorted(m for m in loaded if m.startswith(NOT_IN_THE_ENGINE)) == []


def _top_imports(path: Path) -> set[str]:
    """The top-level package of every import in ``path``, at any depth of its source."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.add((node.module or "").partition(".")[0])
    return found


BENCH = [REPO / "scripts/bench.py", *sorted((REPO / "scripts/bench").glob("*.py"))]


@pytest.mark.parametrize("path", BENCH, ids=lambda p: p.name)
def test_the_bench_builds_on_its_own_helpers_not_the_tests(path: Path) -> None:
    assert "tests" not in _top_imports(path)


def test_every_module_has_a_place_in_the_declared_order() -> None:
    assert sorted(set(MODULES) - set(ORDER)) == [], "add each new module to LAYERS, where it belongs"
    assert sorted(set(ORDER) - set(MODULES)) == [], "LAYERS names modules that no longer exist"


def test_no_module_imports_one_above_it() -> None:
    rank = {module: i for i, module in enumerate(ORDER)}
    upward = [
        f"{module} -> {imported}"
        for module, imports in sorted(GRAPH.items())
        for imported in sorted(imports)
        if module in rank and imported in rank and rank[imported] >= rank[module]
    ]
    assert upward == []


def _oversized() -> list[str]:
    found = []
    limits = {ast.ClassDef: MAX_CLASS_LINES, ast.FunctionDef: MAX_FUNCTION_LINES}
    limits[ast.AsyncFunctionDef] = MAX_FUNCTION_LINES
    for path in [*MODULES.values(), *BENCH]:  # the bench's size limits are bake's
        rel = path.relative_to(REPO).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            limit = limits.get(type(node))
            if limit is not None and node.end_lineno - node.lineno + 1 > limit:
                found.append(f"{rel}:{node.name}")
    return sorted(found)


def test_no_class_over_250_lines_and_no_function_over_60() -> None:
    assert _oversized() == []


# A file in this repository (a top-level folder, on to a name with an extension), or a bare
# Markdown file name. ("docker/bake-action" is an action, not a file: no extension.)
_CITED = re.compile(
    r"(?<![\w./-])((?:bake|docs|docker|scripts|tests|\.github|\.buildkite)/[\w./-]*\.\w+|[\w-]+\.md)\b"
)


def _docstrings() -> list[tuple[Path, str]]:
    found = []
    for folder in ("bake", "tests", "scripts"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if "_vendor" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    text = ast.get_docstring(node)
                    if text:
                        found.append((path, text))
    return found


def _exists(cited: str, near: Path) -> bool:
    if "/" in cited:
        return (REPO / cited).exists() or (near.parent / cited).exists()
    return any(REPO.glob(f"**/{cited}"))


def test_docstrings_name_only_files_that_exist() -> None:
    missing = sorted(
        f"{path.relative_to(REPO)}: {cited}"
        for path, text in _docstrings()
        for cited in _CITED.findall(text)
        if "<" not in cited and not _exists(cited, path)
    )
    assert missing == []


def test_the_readme_stays_short() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move reference material to docs/"


# The command line only assembles the commands: each command's module owns its parser, its handler
# and its exit codes (bake/commands/__init__.py describes the interface).
MAX_CLI_LINES = 250


def test_the_cli_only_assembles_the_commands() -> None:
    lines = (ROOT / "cli.py").read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_CLI_LINES, f"bake/cli.py has {lines} lines; a command's code lives in its own module"


def _command_modules() -> list:
    from bake import cli

    return list(cli.COMMANDS)


@pytest.mark.parametrize("command", _command_modules(), ids=lambda m: m.__name__)
def test_every_command_module_exposes_the_same_interface(command) -> None:
    from bake import usage

    assert isinstance(command.NAME, str) and callable(command.add_parser)
    assert command.EXIT_CODES[0] == 0 and 2 in command.EXIT_CODES, command.EXIT_CODES
    assert set(command.EXIT_CODES) <= set(usage.EXIT_MEANINGS), command.EXIT_CODES
    assert set(command.ENVIRONMENT) <= set(usage.VARIABLES), command.ENVIRONMENT
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    command.add_parser(sub)
    assert list(sub.choices) == [command.NAME]
    runs = [p.get_default("run") for words, p in usage.parsers(parser) if words and not p._subparsers]
    assert runs and all(callable(run) for run in runs), f"{command.NAME}: a parser without run="


def test_every_command_module_is_assembled() -> None:
    """A module under bake/commands/ with add_parser, or a package's command module, is in cli.COMMANDS."""
    found = {
        name
        for name, path in MODULES.items()
        if name.endswith(".command") or "def add_parser(" in path.read_text(encoding="utf-8")
    }
    assert found == {m.__name__ for m in _command_modules()}


# Tests mirror the package: a module of this many lines or more has a test file of its own, so a
# reader finds a module's tests by its path. Hostile cases are filed apart, in tests/reliability/.
MIN_LINES_FOR_A_TEST_FILE = 50
# Modules whose names say nothing of what they do.
VAGUE_NAMES = {"text", "process", "units", "util", "utils", "helpers", "misc", "common", "lib"}


def _test_file_of(path: Path) -> Path:
    """bake/<P>/<m>.py in tests/<P>/test_<m>.py; a package's __init__.py in tests/test_<P>.py."""
    rel = path.relative_to(ROOT)
    if path.name == "__init__.py":
        return REPO / "tests" / rel.parent.parent / f"test_{rel.parent.name}.py"
    return REPO / "tests" / rel.parent / f"test_{path.stem}.py"


def _has_a_test(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(node, ast.FunctionDef) and node.name.startswith("test_") for node in tree.body)


def test_every_module_of_50_lines_has_a_test_file_of_its_own() -> None:
    sized = [
        p for p in MODULES.values() if p.read_text(encoding="utf-8").count("\n") >= MIN_LINES_FOR_A_TEST_FILE
    ]
    assert len(sized) > 50  # the walk found the package
    missing = sorted(
        f"{p.relative_to(REPO)}: {_test_file_of(p).relative_to(REPO)}"
        for p in sized
        if p.name != "__main__.py" and not (_test_file_of(p).exists() and _has_a_test(_test_file_of(p)))
    )
    assert missing == [], "write each module's tests in the file named after it"


@pytest.mark.parametrize(("module", "expected"), [
    ("bake/seed/copier.py", "tests/seed/test_copier.py"),
    ("bake/hashes.py", "tests/test_hashes.py"),
    ("bake/fetch/__init__.py", "tests/test_fetch.py"),
])  # fmt: skip
def test_a_module_s_test_file_mirrors_its_path(module: str, expected: str) -> None:
    assert _test_file_of(REPO / module) == REPO / expected


def test_every_test_folder_mirrors_a_package() -> None:
    """A folder under tests/ is named after a package of bake/, or holds what no module owns."""
    own_kinds = {"image", "reliability", "pod", "nolock"}  # image tests, hostile cases, stand-in pods, shims
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    folders = {p.name for p in (REPO / "tests").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert sorted(folders - packages - own_kinds) == []


def test_no_module_is_named_for_a_vague_role() -> None:
    assert sorted(name for name in MODULES if name.rpartition(".")[2] in VAGUE_NAMES) == []


# A test file is named for what it tests (a module, a command, a failure mode), never for the review
# that asked for it: a round's findings are filed under what they attack.
_NAMED_FOR_A_REVIEW = re.compile(r"round_?\d|first_hour|issue_?\d|finding|defect|review")


def test_no_test_file_is_named_for_a_review_round_or_finding() -> None:
    named = sorted(
        p.relative_to(REPO).as_posix()
        for p in (REPO / "tests").rglob("test_*.py")
        if _NAMED_FOR_A_REVIEW.search(p.stem)
    )
    assert named == []


def _attempt_classes() -> list[type]:
    # bake.fetch loads the HTTP and file attempts; the Hub's loads only when a Hub asset is fetched.
    import bake.fetch.hub_download  # noqa: F401
    from bake.fetch.attempt import Attempt

    found, todo = [], [Attempt]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def test_fetch_attempts_take_one_context_and_hooks_by_keyword() -> None:
    """An attempt is built from one AttemptContext (its options after a ``*``); hooks are named."""
    import dataclasses
    import inspect

    from bake.fetch.attempt import AttemptContext, AttemptHooks

    classes = _attempt_classes()
    assert {cls.__name__ for cls in classes} >= {"HttpAttempt", "FileAttempt", "HubAttempt"}, classes
    for cls in classes:
        positional = [
            p.name
            for p in list(inspect.signature(cls.__init__).parameters.values())[1:]
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        assert positional == ["context"], f"{cls.__qualname__}: {positional}"
    for record in (AttemptContext, AttemptHooks):
        assert all(f.kw_only for f in dataclasses.fields(record)), record.__name__
