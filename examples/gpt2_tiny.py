"""GPT-2 from a tiny config (no download), for shape contracts and the service.

``make_model`` is a factory: contracts name it with ``factory = true``.
``make_mutated`` builds the same model behind a bug that shape contracts
catch: the token ids are reshaped with a hard-coded ``view(8, -1)``, which
only works when ``B * T`` is a multiple of 8 (and silently mixes batches).

    symshape check examples/symshape.toml
"""
import torch
import torch.nn as nn


def make_model(n_layer=2, n_embd=64, n_head=4, n_positions=128, vocab_size=100):
    """transformers' GPT2Model with a tiny config and fixed weights."""
    import transformers
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_positions=n_positions,
                                  vocab_size=vocab_size, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2Model(cfg).eval()


class TinyGPT2(nn.Module):
    """The same model as a class, for the CLI (``symshape flops examples/gpt2_tiny.py:TinyGPT2``),
    which constructs a class it is given without arguments."""

    def __init__(self):
        super().__init__()
        self.gpt = make_model()

    def forward(self, input_ids):
        return self.gpt(input_ids).last_hidden_state


class Mutated(nn.Module):
    """GPT-2 behind a hard-coded batch of 8."""

    def __init__(self):
        super().__init__()
        self.gpt = make_model()

    def forward(self, input_ids):
        B, T = input_ids.shape
        rows = input_ids.view(8, -1)
        return self.gpt(rows).last_hidden_state.reshape(B, T, -1)


def make_mutated():
    return Mutated().eval()
