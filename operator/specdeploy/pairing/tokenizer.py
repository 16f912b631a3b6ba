"""The tokenizer rule: verifier and draft share a vocabulary, and the chat template renders a turn.

Needs ``transformers`` (the ``tokenizers`` extra) and tokenizer files; without either the check
is Skipped, never failed. The rule runs in a short-lived child process: importing transformers
and loading a 150k-token tokenizer would otherwise stay in the operator's memory for good (the
import alone adds about 40 MiB). Its outcome is remembered per pair of tokenizer files, which do
not change within a revision, so each pair costs one child process.
"""

from __future__ import annotations

import filecmp
import functools
import json
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specdeploy import api
from specdeploy.modelinfo import ModelInfo, catalog
from specdeploy.modelinfo.info import TOKENIZER_FILES
from specdeploy.pairing.report import check_result

CHAT_PROBE = "Explain speculative decoding in one sentence."
NAME = "tokenizer"
# Loading two large tokenizers and rendering a template takes a few seconds.
CHILD_TIMEOUT_S = 120.0
_CHILD = "from specdeploy.pairing.tokenizer import child_main; child_main()"
_ONE_CHILD = threading.Lock()

# (model id, tokenizer directory, (file name, size, mtime) of each tokenizer file there)
_Side = tuple[str, str | None, tuple[tuple[str, int, int], ...]]


def _same_tokenizer_json(a: Path, b: Path) -> bool:
    """Whether both directories hold the same tokenizer.json bytes (or neither has one): then
    the draft's tokenizer need not be loaded. Compared as bytes, not parsed: a 150k-token
    tokenizer.json is about 100 MiB as Python objects."""
    first, second = a / "tokenizer.json", b / "tokenizer.json"
    if not first.is_file() or not second.is_file():
        return first.is_file() == second.is_file()
    return filecmp.cmp(first, second, shallow=False)


def check_tokenizer(v: ModelInfo, s: ModelInfo) -> api.CheckResult:
    """The rule's outcome, from a child process (once per pair of tokenizer files)."""
    if v.tokenizer_dir is None:
        why = v.tokenizer_note or f"no tokenizer files for verifier {v.model_id}"
        return check_result(NAME, "Skipped", "TokenizerUnavailable", why)
    try:
        # One child at a time: passes of many resources over the same new pair (an operator
        # restart) wait for the first one's answer instead of each loading the tokenizers.
        with _ONE_CHILD:
            return _in_child(_side(v), _side(s)).model_copy()
    except _ChildFailed as exc:
        return check_result(NAME, "Skipped", "TokenizerUnavailable", f"tokenizer: {exc}")


class _ChildFailed(Exception):
    """The child process gave no outcome (not remembered: the next pass tries again)."""


def _side(model: ModelInfo) -> _Side:
    """What identifies one model's tokenizer files: a changed file is a new key."""
    directory = model.tokenizer_dir
    if directory is None:
        return (model.model_id, None, ())
    stamps = []
    for name in TOKENIZER_FILES:
        try:
            stat = (directory / name).stat()
        except OSError:
            continue
        stamps.append((name, stat.st_size, stat.st_mtime_ns))
    return (model.model_id, str(directory), tuple(stamps))


@functools.lru_cache(maxsize=256)
def _in_child(verifier: _Side, speculator: _Side) -> api.CheckResult:
    request = json.dumps({"verifier": verifier[:2], "speculator": speculator[:2]})
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD],
            input=request,
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise _ChildFailed(f"the check did not finish within {CHILD_TIMEOUT_S:.0f} s") from exc
    except OSError as exc:
        raise _ChildFailed(f"the check's process did not start: {exc}") from exc
    lines = done.stdout.strip().splitlines()
    try:
        return api.CheckResult.model_validate_json(lines[-1] if lines else "")
    except ValueError as exc:
        tail = " ".join(done.stderr.split()[-40:])
        raise _ChildFailed(f"the check's process exited {done.returncode}: {tail}") from exc


def child_main() -> None:
    """The child process: read the two sides from stdin, print the outcome as one JSON line."""
    request = json.load(sys.stdin)

    def info(side: list[Any]) -> ModelInfo:
        model_id, directory = side
        path = Path(directory) if directory else None
        return ModelInfo(model_id=model_id, revision=None, config={}, source="local", tokenizer_dir=path)

    outcome = check_in_process(info(request["verifier"]), info(request["speculator"]))
    print(outcome.model_dump_json())


def check_in_process(v: ModelInfo, s: ModelInfo) -> api.CheckResult:
    """The rule itself, in this process (``check_tokenizer`` runs it in a child)."""
    name = NAME
    assert v.tokenizer_dir is not None, "check_tokenizer skips a verifier without tokenizer files"
    try:
        import jinja2  # noqa: F401  (transformers renders chat templates with it)
        from transformers import AutoTokenizer
    except ImportError:
        return check_result(name, "Skipped", "TransformersUnavailable", "transformers and jinja2 are needed")
    try:
        verifier_tok = AutoTokenizer.from_pretrained(str(v.tokenizer_dir))
    except Exception as exc:  # transformers raises many types for unreadable tokenizers
        return check_result(
            name, "Failed", "TokenizerMismatch", f"tokenizer: verifier {v.model_id}'s does not load: {exc}"
        )
    problems: list[tuple[str, str]] = []
    if s.tokenizer_dir is not None and not _same_tokenizer_json(s.tokenizer_dir, v.tokenizer_dir):
        try:
            draft_vocab: dict[str, int] = AutoTokenizer.from_pretrained(str(s.tokenizer_dir)).get_vocab()
        except Exception as exc:  # as above
            draft_vocab, problems = (
                {},
                [("TokenizerMismatch", f"tokenizer: speculator's does not load: {exc}")],
            )
        verifier_vocab: dict[str, int] = verifier_tok.get_vocab()
        if draft_vocab and draft_vocab != verifier_vocab:
            differing = sum(1 for tok, idx in draft_vocab.items() if verifier_vocab.get(tok) != idx)
            problems.append(
                (
                    "TokenizerMismatch",
                    f"tokenizer: speculator's has {len(draft_vocab)} tokens ({differing} differ), "
                    f"verifier {v.model_id}'s has {len(verifier_vocab)}",
                )
            )
    problems += _chat_template_problems(v, verifier_tok)
    if problems:
        return check_result(name, "Failed", problems[0][0], "; ".join(m for _, m in problems))
    shared = "identical tokenizers; " if s.tokenizer_dir is not None else ""
    return check_result(name, "Passed", "Match", f"{shared}chat template renders")


def _expected_marker(v: ModelInfo, vocab: Mapping[str, int]) -> str | None:
    marker = catalog.chat_marker(v.model_id)
    if marker:
        return marker
    if "<|im_start|>" in vocab:
        return "<|im_start|>user"
    if "<|start_header_id|>" in vocab:
        return "<|start_header_id|>user<|end_header_id|>"
    return None


def _chat_template_problems(v: ModelInfo, tokenizer: Any) -> list[tuple[str, str]]:
    """Render one user turn the way seed 000's sanity check does and look for the chat markers."""
    if not getattr(tokenizer, "chat_template", None):
        return [("ChatTemplateBroken", f"chat template: verifier {v.model_id} has none")]
    try:
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": CHAT_PROBE}], tokenize=False, add_generation_prompt=True
        )
    except Exception as exc:  # jinja errors come in many types
        return [("ChatTemplateBroken", f"chat template: verifier {v.model_id}'s does not render: {exc}")]
    text = str(rendered)
    marker = _expected_marker(v, tokenizer.get_vocab())
    if CHAT_PROBE not in text:
        return [
            ("ChatTemplateBroken", f"chat template: rendered prompt lacks the user message: {text[:120]!r}")
        ]
    if marker is not None and marker not in text:
        return [
            (
                "ChatTemplateBroken",
                f"chat template: expected {marker!r} in the rendered prompt, "
                f"verifier {v.model_id} gives {text[:120]!r}",
            )
        ]
    if marker is None and text.strip() == CHAT_PROBE:
        return [("ChatTemplateBroken", f"chat template: verifier {v.model_id}'s adds no chat markers")]
    return []
