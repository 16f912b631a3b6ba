"""The documentation says what the code does: flags, exit codes and allowed values.

Read from the argparse parsers (``specdeploy.cli.build_parser``), ``specdeploy.exitcodes`` and
the generated CRD, never from a list kept here, so a new flag, code or enum is checked as soon
as it exists:

- every flag of every built-in verb has a row in that verb's table in docs/cli.md (bench's: in
  docs/benchmark.md), and every row names a flag the verb has;
- every ``specdeploy VERB ...`` in README.md and docs/ uses only flags VERB has;
- README's one exit code table lists exactly ``ExitCode``, and no other README line lists codes;
- every enum in the CRD has its row in docs/api.md's table of allowed values, with the same
  values, and every list of tensor-parallel sizes in the docs is the schema's or auto's.
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from specdeploy.api.rules import TENSOR_SIZES
from specdeploy.cli import COMMANDS, build_parser, main
from specdeploy.exitcodes import ExitCode
from specdeploy.planning.planner import AUTO_TENSOR_SIZES
from support.paths import REPO

README = REPO / "README.md"
CLI_DOC = REPO / "docs" / "cli.md"
API_DOC = REPO / "docs" / "api.md"
CRD_FILE = REPO / "crds" / "specdeploy.io_speculativedeployments.yaml"
# The verbs whose flag table lives with the rest of their guide; docs/cli.md links to it.
REFERENCES = {"bench": (REPO / "docs" / "benchmark.md", "## Options")}
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`([^`\n]+)`")
INDENTED_COMMAND = re.compile(r"^(?: {4,}|\t)((?:\$ )?specdeploy .*)$", re.MULTILINE)
FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")
# Where a shell line stops being the specdeploy command: a pipe, a second command, a comment.
COMMAND_END = re.compile(r"\s(?:\||&&|;|>|#)\s|\s&$")
# A list of tensor-parallel sizes: "1, 2, 4, 8, 16", "1/2/4/8" or "1, 2, 4, 8, 16, 32 or 64".
TP_LIST = re.compile(r"\b1(?:\s*(?:,|/|,? or)\s*\d+){3,}")
TP_LINE = re.compile(r"\btensor\b|\bTP\b", re.IGNORECASE)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


VERBS = _subparsers(build_parser())
BUILT_IN = {module.__name__.rsplit(".", 1)[-1] for module in COMMANDS}


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {o for action in parser._actions for o in action.option_strings if o not in ("-h", "--help")}


def _section(text: str, heading: str) -> str:
    """The text under a heading, up to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    match = re.search(rf"^{re.escape(heading)}\s*$", text, re.MULTILINE)
    assert match, f"no heading {heading!r}"
    end = re.compile(rf"^#{{1,{len(level)}}} ", re.MULTILINE).search(text, match.end())
    return text[match.end() : end.start() if end else len(text)]


def _table_rows(text: str) -> list[list[str]]:
    """The cells of each row of the first Markdown table in ``text`` (header and rule left out)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            rows.append(cells)
        elif rows:
            break
    return rows[2:]


# -- flags -----------------------------------------------------------------------------------


@pytest.mark.parametrize("verb", sorted(BUILT_IN))
def test_every_flag_has_a_row_in_docs_cli_and_every_row_a_flag(verb: str) -> None:
    document, heading = REFERENCES.get(verb, (CLI_DOC, f"## `specdeploy {verb}`"))
    rows = _table_rows(_section(document.read_text(), heading))
    documented = {flag for row in rows for flag in FLAG.findall(" ".join(CODE_SPAN.findall(row[0])))}
    flags = _flags(VERBS[verb])
    assert sorted(flags - documented) == [], f"flags of `specdeploy {verb}` missing from docs/cli.md"
    assert sorted(documented - flags) == [], f"docs/cli.md documents flags `specdeploy {verb}` lacks"


def _commands(text: str) -> Iterator[str]:
    """Every ``specdeploy VERB ...`` command in a Markdown text: code spans and fenced lines."""
    prose = FENCE.sub("", text)
    snippets = CODE_SPAN.findall(prose) + INDENTED_COMMAND.findall(prose)
    for block in FENCE.findall(text):
        snippets += block.splitlines()[1:-1]
    for snippet in snippets:
        found = re.search(r"(?:^|[\s/$])specdeploy\s+([a-z][\w-]*)(.*)", snippet)
        if found and found.group(1) in VERBS:
            rest = COMMAND_END.split(found.group(2) + " ", maxsplit=1)[0]
            yield f"{found.group(1)}{rest}".replace("\\|", "|").rstrip(" \\")


def _unknown_flags(command: str) -> list[str]:
    words = shlex.split(command.replace("[", " ").replace("]", " "), posix=False)
    parser = VERBS[words[0]]
    known = _flags(parser)
    for word in words[1:]:
        nested = _subparsers(parser)
        for name in word.split("|"):
            if name in nested:
                known |= _flags(nested[name])
    return [flag for word in words[1:] for flag in FLAG.findall(word) if flag not in known]


def test_every_documented_command_uses_flags_its_verb_has() -> None:
    unknown = []
    for document in [README, *sorted((REPO / "docs").glob("*.md"))]:
        for command in _commands(document.read_text()):
            unknown += [
                f"{document.name}: `specdeploy {command}`: {flag}" for flag in _unknown_flags(command)
            ]
    assert unknown == []


def test_the_command_finder_reads_spans_tables_and_fences() -> None:
    text = (
        "| `specdeploy plan -f cr.yaml [--gpus ...] [-o json\\|yaml]` | x |\n"
        "```sh\n$ specdeploy bench NAME --concurrency 1,4 | tee out  # --not-this\n```\n"
        "`specdeploy sandbox up --engine-nodes 0`\n"
        "    specdeploy render -f cr.yaml --offline   # --also-not-this\n"
    )
    commands = list(_commands(text))
    assert commands == [
        "plan -f cr.yaml [--gpus ...] [-o json|yaml]",
        "sandbox up --engine-nodes 0",
        "render -f cr.yaml --offline",
        "bench NAME --concurrency 1,4",
    ]
    assert [_unknown_flags(c) for c in commands] == [[], [], [], []]
    assert _unknown_flags("plan -f cr.yaml --gpu h100:8") == ["--gpu"]


# -- exit codes ------------------------------------------------------------------------------


def _exit_code_rows() -> list[list[str]]:
    section = _section(README.read_text(), "## The command line")
    table = section[section.index("| exit code |") :]
    return _table_rows(table)


def test_readme_has_one_exit_code_table_equal_to_the_constants() -> None:
    rows = _exit_code_rows()
    assert [int(row[0].strip("`")) for row in rows] == sorted(code.value for code in ExitCode)
    for row in rows:
        verbs = set(re.findall(r"`([a-z]+)`", row[-1]))
        assert verbs and verbs <= set(VERBS), row


def test_no_other_readme_line_lists_exit_codes() -> None:
    others = [
        line
        for line in README.read_text().splitlines()
        if re.search(r"\bexit (?:codes? )?\d", line, re.IGNORECASE) and not line.startswith("| `")
    ]
    table_lines = {f"| {' | '.join(row)} |" for row in _exit_code_rows()}
    assert [line for line in others if line not in table_lines] == []
    rows = [line for line in README.read_text().splitlines() if line.startswith("| `specdeploy ")]
    assert rows and [row for row in rows if re.search(r"\bexit \d", row)] == []


# -- allowed values --------------------------------------------------------------------------


def _enums(node: dict[str, Any], path: str) -> Iterator[tuple[str, list[str]]]:
    if "enum" in node:
        yield path, [str(value) for value in node["enum"]]
    for name, child in node.get("properties", {}).items():
        yield from _enums(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _enums(node["items"], f"{path}[]")


def test_every_crd_enum_is_listed_with_its_values_in_docs_api() -> None:
    crd = yaml.safe_load(CRD_FILE.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    expected = {path.lstrip("."): values for path, values in _enums(schema, "")}
    expected["spec.parallelism.tensor"] = ["auto", *map(str, TENSOR_SIZES)]
    rows = _table_rows(_section(API_DOC.read_text(), "## Allowed values"))
    documented = {row[0].strip("`"): re.findall(r"`([^`]+)`", row[1]) for row in rows}
    assert documented == expected


def test_every_list_of_tensor_sizes_is_the_schemas_or_autos() -> None:
    allowed = {tuple(TENSOR_SIZES), tuple(AUTO_TENSOR_SIZES)}
    wrong = []
    for document in [README, *sorted((REPO / "docs").glob("*.md"))]:
        for number, line in enumerate(document.read_text().splitlines(), 1):
            if not TP_LINE.search(line):
                continue
            for found in TP_LIST.finditer(line):
                sizes = tuple(int(size) for size in re.findall(r"\d+", found.group()))
                if sizes not in allowed:
                    wrong.append(f"{document.name}:{number}: {found.group()}")
    assert wrong == []


# -- what render emits -----------------------------------------------------------------------


def test_render_emits_a_disruption_budget_only_above_one_replica_as_documented(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = yaml.safe_load((REPO / "manifests/examples/qwen3-30b-a3b-instruct-2507-eagle3.yaml").read_text())
    kinds = {}
    for replicas in (1, 2):
        body["spec"]["replicas"] = replicas
        path = tmp_path / f"r{replicas}.yaml"
        path.write_text(yaml.safe_dump(body))
        assert main(["render", "-f", str(path), "--offline"]) == 0
        kinds[replicas] = {d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out)}
    assert "PodDisruptionBudget" not in kinds[1] and "PodDisruptionBudget" in kinds[2]
    render_lines = [
        line
        for line in [*README.read_text().splitlines(), *CLI_DOC.read_text().splitlines()]
        if "specdeploy render" in line and "PodDisruptionBudget" in line
    ]
    assert render_lines and all(
        re.search(r"replicas > 1|more than one replica", line) for line in render_lines
    )
