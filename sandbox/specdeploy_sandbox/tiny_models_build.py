"""Build the sandbox's tiny verifier and EAGLE-3 speculators, offline and deterministically.

Run by :mod:`specdeploy_sandbox.tiny_models` with the engine environment's interpreter (it needs
torch, transformers, tokenizers and speculators, which the operator does not install), as
``python tiny_models_build.py OUT_DIR``. Each model is written to ``OUT_DIR/<name>/``.

The weights are seeded random, so acceptance would be about zero; two edits make it exact
instead. The verifier's final norm is zeroed, so every logit is 0 and greedy decoding emits
token 0 forever. Each draft's final norm is zeroed too, so it always proposes draft token 0,
which the engine maps to target token ``0 + d2t[0]``: ``d2t[0] = 0`` makes every proposal
accepted, ``d2t[0] = 1`` none.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

VERIFIER = "tiny-qwen3"
HIDDEN = 128
LAYERS = 8
VOCAB = 512
DRAFT_VOCAB = 256
SPECULATIVE_TOKENS = 3
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SEED = 20261201


def _tokenizer(out: Path) -> None:
    """A byte-level tokenizer (256 byte symbols, no merges) with ChatML special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {symbol: index for index, symbol in enumerate(sorted(alphabet))}
    for special in SPECIALS:
        vocab[special] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(SPECIALS))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
    )
    fast.save_pretrained(out)


def _verifier(out: Path, hidden: int = HIDDEN) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(SEED + hidden)
    config = Qwen3Config(
        hidden_size=hidden,
        intermediate_size=256,
        num_hidden_layers=LAYERS,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,  # the CPU attention kernels reject smaller heads
        vocab_size=VOCAB,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        eos_token_id=len(SPECIALS) + 255,
        pad_token_id=256,
        bos_token_id=None,
        dtype="float32",
    )
    model = Qwen3ForCausalLM(config)
    with torch.no_grad():
        model.model.norm.weight.zero_()
    model.save_pretrained(out)
    _tokenizer(out)


def _speculator(out: Path, verifier_dir: Path, verifier_id: str, offset: int, hidden: int = HIDDEN) -> None:
    """An EAGLE-3 draft for the verifier in ``verifier_dir``; it always proposes ``offset``."""
    import torch
    from speculators.models.eagle3 import Eagle3DraftModel
    from transformers import LlamaConfig

    torch.manual_seed(SEED + offset + hidden)
    layer = LlamaConfig(
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        vocab_size=VOCAB,
        max_position_embeddings=2048,
    )
    t2d = torch.zeros(VOCAB, dtype=torch.bool)
    t2d[:DRAFT_VOCAB] = True
    d2t = torch.zeros(DRAFT_VOCAB, dtype=torch.long)
    d2t[0] = offset
    model = Eagle3DraftModel.from_training_args(
        layer,
        t2d=t2d,
        d2t=d2t,
        draft_vocab_size=DRAFT_VOCAB,
        norm_before_residual=True,
        ttt_steps=SPECULATIVE_TOKENS,
        verifier_name_or_path=str(verifier_dir),
        draft_attn_impl="eager",
    )
    with torch.no_grad():
        model.norm.weight.zero_()
    model.save_pretrained(out)
    _declare_verifier(out / "config.json", verifier_id)


def _declare_verifier(config_file: Path, verifier_id: str) -> None:
    """Name the verifier by its hub id, as a published speculator does, not by the build path."""
    config = json.loads(config_file.read_text())
    config["speculators_config"]["verifier"]["name_or_path"] = verifier_id
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _break_weights(model_dir: Path) -> None:
    """Drop the draft's input projection, so the engine fails while loading it."""
    from safetensors.torch import load_file, save_file

    weights_file = model_dir / "model.safetensors"
    weights = load_file(weights_file)
    weights["fc.weight"] = weights["fc.weight"][:, :HIDDEN].contiguous()
    save_file(weights, weights_file, metadata={"format": "pt"})


def build(out: Path, org: str) -> None:
    verifier_dir = out / VERIFIER
    verifier_id = f"{org}/{VERIFIER}"
    _verifier(verifier_dir)
    _speculator(out / f"{VERIFIER}-eagle3-accept-all", verifier_dir, verifier_id, offset=0)
    _speculator(out / f"{VERIFIER}-eagle3-accept-none", verifier_dir, verifier_id, offset=1)
    _speculator(out / f"{VERIFIER}-eagle3-broken", verifier_dir, verifier_id, offset=0)
    _break_weights(out / f"{VERIFIER}-eagle3-broken")
    # Built against a wider verifier, so it reads hidden states of the wrong size: the pairing
    # check refuses it (HiddenSizeMismatch) although it names sandbox/tiny-qwen3 as its verifier.
    wide = out.parent / f".{out.name}-wide-verifier"
    _verifier(wide, hidden=2 * HIDDEN)
    _speculator(out / f"{VERIFIER}-eagle3-hidden256", wide, verifier_id, offset=0, hidden=2 * HIDDEN)
    shutil.rmtree(wide)


if __name__ == "__main__":
    build(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "sandbox")
