"""The tokenizer rule: verifier and draft share a vocabulary, and the chat template renders a turn.

Needs ``transformers`` (the ``tokenizers`` extra) and tokenizer files; without either the check
is Skipped, never failed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specdeploy import api
from specdeploy.modelinfo import ModelInfo, catalog
from specdeploy.pairing.report import check_result

CHAT_PROBE = "Explain speculative decoding in one sentence."


def _tokenizer_json(directory: Path) -> Any:
    path = directory / "tokenizer.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def check_tokenizer(v: ModelInfo, s: ModelInfo) -> api.CheckResult:
    name = "tokenizer"
    if v.tokenizer_dir is None:
        return check_result(
            name, "Skipped", "TokenizerUnavailable", f"no tokenizer files for verifier {v.model_id}"
        )
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
    if s.tokenizer_dir is not None and _tokenizer_json(s.tokenizer_dir) != _tokenizer_json(v.tokenizer_dir):
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
