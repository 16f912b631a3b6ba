"""Shared helpers of the pairing tests: fixture configs and tiny local tokenizers (no downloads)."""

from __future__ import annotations

import json
from pathlib import Path

from specdeploy.modelinfo import ModelInfo, info_from_config

FIXTURES = Path(__file__).parent / "fixtures" / "pairing"

CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
PLAIN_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
BROKEN_TEMPLATE = "{% for message in messages %}{{ message['content'] }"

WORDS = ["<|im_start|>", "<|im_end|>", "user", "assistant", "Explain", "speculative", "decoding", "in", "one"]


def fixture(name: str, model_id: str, tokenizer_dir: Path | None = None) -> ModelInfo:
    """A fixture config as the metadata the resolver would return for ``model_id``."""
    meta = info_from_config(model_id, json.loads((FIXTURES / f"{name}.json").read_text()), source="inline")
    if tokenizer_dir is None:
        return meta
    return ModelInfo(
        model_id=meta.model_id,
        revision=None,
        config=meta.config,
        source="inline",
        tokenizer_dir=tokenizer_dir,
    )


def write_tokenizer(directory: Path, *, template: str | None = CHATML_TEMPLATE, extra_words: int = 0) -> Path:
    """A tiny WordLevel tokenizer.json plus tokenizer_config.json, as a Hub repo would ship them."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["[UNK]", *WORDS, *(f"word{i}" for i in range(extra_words))]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    config: dict[str, object] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "[UNK]",
        "eos_token": "<|im_end|>",
    }
    if template is not None:
        config["chat_template"] = template
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory
