"""A mixture-of-experts model's routing and expert layout, read from its Hugging Face `config.json` (Mixtral,
Qwen2-MoE, Qwen3-MoE). A key or value the engine would serve differently from transformers is refused here,
at load time, naming the key."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe")
_DEFAULTS = {  # what transformers' config classes assume where a config.json leaves a key out
    "mixtral": {"num_local_experts": 8, "num_experts_per_tok": 2},
    "qwen2_moe": {"num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
                  "shared_expert_intermediate_size": 5632},
    "qwen3_moe": {"num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768},
}
Scoring = Literal["softmax", "sigmoid"]


@dataclass(frozen=True, slots=True)
class MoEConfig:
    num_experts: int
    top_k: int  # experts per token
    expert_size: int  # an expert's intermediate width
    sparse: tuple[bool, ...]  # per layer: experts (True) or the dense MLP of `intermediate_size`
    scoring: Scoring = "softmax"  # softmax over all experts' logits, or each logit's sigmoid (DeepSeek-V3)
    renormalize: bool = True  # the top-k weights divided by their sum
    shared_size: int = 0  # the shared expert's intermediate width (0: none)
    shared_gate: bool = False  # Qwen2-MoE: the shared expert's output scaled by sigmoid(x · w)
    block: str = "mlp"  # the checkpoint's name of the feed-forward module (Mixtral: block_sparse_moe)
    expert_parts: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")  # Mixtral: w1, w3, w2

    def layers(self, start: int, stop: int) -> MoEConfig:
        """This config for the layers [start, stop) (a pipeline stage's)."""
        return replace(self, sparse=self.sparse[start:stop])


def _positive(raw: dict, key: str) -> int:
    value = raw.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"config.json {key}: {value!r} is not a positive integer")
    return value


def _refuse(raw: dict, key: str, served: tuple, default: object) -> None:
    value = raw.get(key, default)
    if value not in served:
        raise ValueError(f"config.json {key}: {value!r} is not served; served: {', '.join(map(repr, served))}")


def moe_config(raw: dict) -> MoEConfig:
    """The MoE part of a config.json whose model_type is one of MOE_TYPES."""
    model_type, layers = raw["model_type"], raw["num_hidden_layers"]
    if model_type != "mixtral" and "num_local_experts" in raw:  # transformers 5 writes Qwen3-MoE's under this name
        raw = {"num_experts": raw["num_local_experts"], **raw}
    raw = {**_DEFAULTS[model_type], "decoder_sparse_step": 1, **raw}
    _refuse(raw, "hidden_act", ("silu",), "silu")
    if model_type == "mixtral":
        experts, top_k = _positive(raw, "num_local_experts"), _positive(raw, "num_experts_per_tok")
        config = MoEConfig(experts, top_k, _positive(raw, "intermediate_size"), (True,) * layers,
                           block="block_sparse_moe", expert_parts=("w1", "w3", "w2"))
    else:
        _refuse(raw, "use_sliding_window", (False,), False)
        experts, top_k = _positive(raw, "num_experts"), _positive(raw, "num_experts_per_tok")
        step = _positive(raw, "decoder_sparse_step")
        dense = set(raw.get("mlp_only_layers") or ())
        sparse = tuple(i not in dense and (i + 1) % step == 0 for i in range(layers))
        shared = _positive(raw, "shared_expert_intermediate_size") if model_type == "qwen2_moe" else 0
        _refuse(raw, "norm_topk_prob", (True, False), False)
        config = MoEConfig(experts, top_k, _positive(raw, "moe_intermediate_size"), sparse,
                           renormalize=raw.get("norm_topk_prob", False), shared_size=shared, shared_gate=shared > 0)
    if top_k > experts:
        raise ValueError(f"config.json num_experts_per_tok: {top_k} exceeds the {experts} experts")
    return config
