"""A small BERT encoder in plain torch that loads all-MiniLM-L6-v2's safetensors weights.

`embed_reference(sentences)` is the reference embedding: tokenize, encode with this module,
mean-pool the last hidden state over the attention mask, L2-normalise.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from torch import nn

from examples.minilm.processing import mean_pool, model_dir, tokenize, weights_path


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 384
    num_hidden_layers: int = 6
    num_attention_heads: int = 12
    intermediate_size: int = 1536
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12

    @classmethod
    def from_json(cls, path: Path) -> BertConfig:
        raw = json.loads(path.read_text())
        return cls(**{k: raw[k] for k in cls.__dataclass_fields__ if k in raw})


class Embeddings(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        token_types = torch.zeros_like(input_ids)
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)[None]
            + self.token_type_embeddings(token_types)
        )
        return self.LayerNorm(x)  # type: ignore[no-any-return]


class SelfAttention(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        n, s, _ = x.shape
        return x.view(n, s, self.heads, self.head_size).transpose(1, 2)

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_size) + mask_bias
        context = torch.softmax(scores, dim=-1) @ v
        n, _, s, _ = context.shape
        return context.transpose(1, 2).reshape(n, s, self.heads * self.head_size)


class DenseNorm(nn.Module):
    """dense -> add the residual -> LayerNorm (BERT's `*.output` blocks)."""

    def __init__(self, config: BertConfig, in_size: int) -> None:
        super().__init__()
        self.dense = nn.Linear(in_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(x) + residual)  # type: ignore[no-any-return]


class Attention(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.self = SelfAttention(config)
        self.output = DenseNorm(config, config.hidden_size)

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(x, mask_bias), x)  # type: ignore[no-any-return]


class Intermediate(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(self.dense(x))


class Layer(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = Attention(config)
        self.intermediate = Intermediate(config)
        self.output = DenseNorm(config, config.intermediate_size)

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        attended = self.attention(x, mask_bias)
        return self.output(self.intermediate(attended), attended)  # type: ignore[no-any-return]


class Encoder(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(Layer(config) for _ in range(config.num_hidden_layers))


class Bert(nn.Module):
    """forward(input_ids, attention_mask) -> last_hidden_state [N, S, hidden]."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.embeddings = Embeddings(config)
        self.encoder = Encoder(config)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        # 0 where attended, a large negative number on padding: [N, 1, 1, S]
        mask_bias = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * -1e9
        x = self.embeddings(input_ids)
        for layer in self.encoder.layer:
            x = layer(x, mask_bias)
        return x  # type: ignore[no-any-return]

    @classmethod
    def pretrained(cls) -> Bert:
        """The encoder with all-MiniLM-L6-v2's weights, in eval mode."""
        bert = cls(BertConfig.from_json(model_dir() / "config.json"))
        state = {
            k: v
            for k, v in load_file(str(weights_path())).items()
            if not k.startswith("pooler.") and k != "embeddings.position_ids"
        }
        bert.load_state_dict(state, strict=True)
        return bert.eval()


def embed_reference(sentences: Sequence[str], bert: Bert | None = None) -> np.ndarray:
    """Sentence embeddings [N, 384] computed with the torch module: the reference."""
    ids, mask = tokenize(sentences)
    module = bert if bert is not None else Bert.pretrained()
    with torch.inference_mode():
        hidden: np.ndarray = module(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
    return mean_pool(hidden, mask)
