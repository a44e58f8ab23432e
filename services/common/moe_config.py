"""A mixture-of-experts model's routing and expert layout, read from its Hugging Face `config.json` (Mixtral,
Qwen2-MoE, Qwen3-MoE, DeepSeek-V3). A key or value the engine would serve differently from transformers is refused here,
at load time, naming the key."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3")
_DEFAULTS: dict[str, dict[str, object]] = {  # what transformers' config classes assume where a key is left out
    "mixtral": {"num_local_experts": 8, "num_experts_per_tok": 2},
    "qwen2_moe": {"num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
                  "shared_expert_intermediate_size": 5632},
    "qwen3_moe": {"num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768},
    "deepseek_v3": {"n_routed_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 2048,
                    "n_shared_experts": 1, "n_group": 8, "topk_group": 4, "routed_scaling_factor": 2.5,
                    "norm_topk_prob": True, "first_k_dense_replace": 3},
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
    groups: int = 1  # DeepSeek-V3: experts in `groups` groups, a token's top-k taken from its best `top_groups`
    top_groups: int = 1
    scaling: float = 1.0  # the routed experts' weights times this (routed_scaling_factor)
    weights_in_dtype: bool = False  # Qwen2/3-MoE: top-k weights rounded to the model's dtype before the product
    shared_size: int = 0  # the shared expert's intermediate width (0: none)
    shared_gate: bool = False  # Qwen2-MoE: the shared expert's output scaled by sigmoid(x · w)
    shared_name: str = "shared_expert"  # DeepSeek-V3: shared_experts
    held: tuple[int, int] | None = None  # a rank's part: the experts [start, stop) it holds; None: all
    block: str = "mlp"  # the checkpoint's name of the feed-forward module (Mixtral: block_sparse_moe)
    expert_parts: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")  # Mixtral: w1, w3, w2

    def layers(self, start: int, stop: int) -> MoEConfig:
        """This config for the layers [start, stop) (a pipeline stage's)."""
        return replace(self, sparse=self.sparse[start:stop])

    def rank_part(self, experts: range, expert_size: int, shared_size: int) -> MoEConfig:
        """This config for one rank's part: the routed experts it holds, each at `expert_size` columns of its width,
        and `shared_size` columns of the shared expert's."""
        return replace(self, held=(experts.start, experts.stop), expert_size=expert_size, shared_size=shared_size)

    @property
    def held_experts(self) -> range:
        return range(*self.held) if self.held is not None else range(self.num_experts)


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
    if model_type == "deepseek_v3":
        config = _deepseek_v3(raw, layers)
        experts, top_k = config.num_experts, config.top_k
    elif model_type == "mixtral":
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
                           renormalize=raw.get("norm_topk_prob", False), weights_in_dtype=True, shared_size=shared,
                           shared_gate=shared > 0)
    if top_k > experts:
        raise ValueError(f"config.json num_experts_per_tok: {top_k} exceeds the {experts} experts")
    return config


def _deepseek_v3(raw: dict, layers: int) -> MoEConfig:
    """Sigmoid scores plus the correction bias choose the experts among the best groups; weights without the bias."""
    _refuse(raw, "scoring_func", ("sigmoid",), "sigmoid")
    _refuse(raw, "topk_method", ("noaux_tc",), "noaux_tc")
    _refuse(raw, "moe_layer_freq", (1,), 1)
    _refuse(raw, "norm_topk_prob", (True, False), True)
    experts, groups = _positive(raw, "n_routed_experts"), _positive(raw, "n_group")
    top_groups, top_k = _positive(raw, "topk_group"), _positive(raw, "num_experts_per_tok")
    if experts % groups or experts // groups < 2:
        raise ValueError(f"config.json n_group: {groups} groups of the {experts} experts are not groups of 2 or more")
    if top_groups > groups:
        raise ValueError(f"config.json topk_group: {top_groups} exceeds n_group {groups}")
    if top_k > top_groups * experts // groups:
        raise ValueError(f"config.json num_experts_per_tok: {top_k} exceeds the experts of {top_groups} groups")
    dense = raw.get("first_k_dense_replace", 0)
    shared = _positive(raw, "n_shared_experts") * _positive(raw, "moe_intermediate_size")
    return MoEConfig(experts, top_k, raw["moe_intermediate_size"], tuple(i >= dense for i in range(layers)),
                     scoring="sigmoid", renormalize=raw["norm_topk_prob"], groups=groups, top_groups=top_groups,
                     scaling=float(raw["routed_scaling_factor"]), shared_size=shared, shared_name="shared_experts")
