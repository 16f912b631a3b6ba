"""Build the sandbox's tiny verifier and EAGLE-3 speculators, offline and deterministically.

Run by :mod:`specdeploy_sandbox.tiny_models` with the engine environment's interpreter (it needs
torch, transformers, tokenizers and speculators, which the operator does not install), as
``python tiny_models_build.py OUT_DIR``. Each model is written to ``OUT_DIR/<name>/``.

The weights are seeded random, so acceptance would be about zero; two edits make it exact
instead. The verifier's final norm is zeroed, so every logit is 0 and greedy decoding emits
token 0 forever. Each draft's final norm is zeroed too, so it always proposes draft token 0,
which the engine maps to target token ``0 + d2t[0]``: ``d2t[0] = 0`` makes every proposal
accepted, ``d2t[0] = 1`` none.

The partial draft is accepted about half the time at its first position and less after (measured
with vLLM 0.32.0 on CPU on the prompts of ``vllm bench serve``'s random dataset: 0.55, 0.33 and
0.19 of drafts at positions 1, 2 and 3). Its proposal is the sign of a sum of two of the
verifier's hidden-state coordinates, weighted more toward the second at each step of the chain;
see ``_partial_speculator``.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

VERIFIER = "tiny-qwen3"
HEAVY = "tiny-qwen3-heavy"
HIDDEN = 128
INTERMEDIATE = 256
HEAVY_INTERMEDIATE = 4096
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
        intermediate_size=INTERMEDIATE,
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


def _heavy_verifier(out: Path, verifier_dir: Path) -> None:
    """The verifier with MLPs 16 times as wide whose extra units write nothing: the same tokens and
    hidden states, but 50 MB of weights read per step instead of 5 (more than this CPU's last-level
    cache). A step then costs about the same for 1 token as for 8, and grows beyond, as a large
    model's does on a GPU, so the draft length that pays depends on the batch size."""
    import torch
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(SEED + HEAVY_INTERMEDIATE)
    model = Qwen3ForCausalLM.from_pretrained(verifier_dir, dtype=torch.float32)
    extra = HEAVY_INTERMEDIATE - INTERMEDIATE
    with torch.no_grad():
        for layer in model.model.layers:
            mlp = layer.mlp
            gate = torch.cat([mlp.gate_proj.weight, torch.randn(extra, HIDDEN) * 0.02])
            up = torch.cat([mlp.up_proj.weight, torch.randn(extra, HIDDEN) * 0.02])
            down = torch.cat([mlp.down_proj.weight, torch.zeros(HIDDEN, extra)], dim=1)
            for name, weight in (("gate_proj", gate), ("up_proj", up), ("down_proj", down)):
                linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
                linear.weight.copy_(weight)
                setattr(mlp, name, linear)
    model.config.intermediate_size = HEAVY_INTERMEDIATE
    model.save_pretrained(out)
    _tokenizer(out)


def _draft(verifier_dir: Path, seed: int, d2t_first: int = 0, hidden: int = HIDDEN) -> Any:
    """A seeded EAGLE-3 draft (speculators' ``Eagle3DraftModel``) for the verifier in
    ``verifier_dir``: one Llama layer, a draft vocabulary of the first DRAFT_VOCAB target tokens,
    draft token 0 mapped to target ``d2t_first``."""
    import torch
    from speculators.models.eagle3 import Eagle3DraftModel
    from transformers import LlamaConfig

    torch.manual_seed(seed)
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
    d2t[0] = d2t_first
    return Eagle3DraftModel.from_training_args(
        layer,
        t2d=t2d,
        d2t=d2t,
        draft_vocab_size=DRAFT_VOCAB,
        norm_before_residual=True,
        ttt_steps=SPECULATIVE_TOKENS,
        verifier_name_or_path=str(verifier_dir),
        draft_attn_impl="eager",
    )


def _speculator(out: Path, verifier_dir: Path, verifier_id: str, offset: int, hidden: int = HIDDEN) -> None:
    """An EAGLE-3 draft for the verifier in ``verifier_dir``; it always proposes ``offset``."""
    import torch

    model = _draft(verifier_dir, SEED + offset + hidden, offset, hidden)
    with torch.no_grad():
        model.norm.weight.zero_()
    model.save_pretrained(out)
    _declare_verifier(out / "config.json", verifier_id)


# The verifier's auxiliary hidden-state coordinates (layers 2, 4, 5 side by side) the partial draft
# reads, and how much more its norm weighs the second one at each draft step. Chosen by running
# the verifier over the prompts `vllm bench serve --dataset-name random` sends (seeds 0-3), walking
# each completion as the engine drafts and verifies it, then measured with vLLM itself.
PARTIAL_FIRST, PARTIAL_SECOND, PARTIAL_GROWTH = 366, 284, 1.5


def _partial_speculator(out: Path, verifier_dir: Path, verifier_id: str) -> None:
    """An EAGLE-3 draft proposing token 0 (the verifier's every token) when ``x[a] + g^k x[b] > 0``.

    Attention and MLP write nothing (their output projections are zero), so each step's hidden
    state is the previous one through the layer's hidden norm: its weight ``g`` on the second
    coordinate compounds along the chain, and the draft's k-th proposal is the sign of
    ``x[a] + g^k x[b]``, where ``x`` is the verifier's hidden state the chain started from (``fc``
    copies the two coordinates, nothing else). Row 0 of the head is that sum, row 1 its negation
    (target token 1, never emitted); every other row is zero, so one of the two always wins.
    """
    import torch

    model = _draft(verifier_dir, SEED)
    weights = model.state_dict()
    with torch.no_grad():
        for silent in (
            "fc.weight",
            "layers.0.self_attn.o_proj.weight",
            "layers.0.mlp.down_proj.weight",
            "lm_head.weight",
        ):
            weights[silent].zero_()
        weights["fc.weight"][0, PARTIAL_FIRST] = 1.0
        weights["fc.weight"][1, PARTIAL_SECOND] = 1.0
        weights["layers.0.hidden_norm.weight"].fill_(1.0)
        weights["layers.0.hidden_norm.weight"][1] = PARTIAL_GROWTH
        weights["norm.weight"].fill_(1.0)
        weights["lm_head.weight"][0, :2] = 1.0
        weights["lm_head.weight"][1, :2] = -1.0
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
    _heavy_verifier(out / HEAVY, verifier_dir)
    _partial_speculator(out / f"{HEAVY}-eagle3-partial", out / HEAVY, f"{org}/{HEAVY}")
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
