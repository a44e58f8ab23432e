"""A mixture-of-experts model's latency model scaled from a dense model's set on the same device, where no
profile of it exists (the shipped A100-80GB sets hold OPT fits only).

At every tensor-parallel degree (the dense set's own and the powers of two, filled in by `LatencyModel.at`), by the
appendix-A reading of each term:
- prefill: the fixed cost by the ratio of layers; the per-token term (compute) by the parameters every token
  passes through (`dense_params`: attention, dense and shared FFNs, embeddings); the attention term by
  layers · heads · head width;
- decode: the fixed cost (the weight read) by those parameters and by the bytes each is stored in; the
  per-context-token term (the KV read) by the KV bytes per token, times tp for a latent (MLA), which every
  tensor-parallel rank reads whole; the per-request term (compute) by the dense parameters.
The routed experts (`experts.py`) are costed from one GPU's seconds per parameter at the set's smallest degree d:
reading one (decode's fixed term · d / parameters of the dense model, times the bytes ratio) and computing one
token through one (prefill's per-token term · d / parameters).
"""

from __future__ import annotations

from services.common.step_model import DecodeCoeffs, PrefillCoeffs
from services.common.step_model.experts import EXPERT_PRODUCT_S, ExpertCost
from services.common.step_model.latency import LatencyModel, TPCoefficients
from services.common.step_model.shape import ModelShape

IMBALANCE = 1.3  # under EP the busiest GPU's tokens over the mean: routing is not uniform (an assumption)
ACTIVATION_BYTES = 2  # a hidden state as the all-to-all sends it (16-bit)
DEGREES = (1, 2, 4, 8, 16, 32, 64)  # tensor-parallel degrees filled in from the dense set (appendix A) and scaled


def moe_from_dense(base: LatencyModel, shape: ModelShape, imbalance: float = IMBALANCE) -> LatencyModel:
    """The latency model of `shape` (with routed experts) on the device `base`, a dense model's set, was fitted on."""
    b = base.shape
    layers = shape.layers / b.layers
    dense = shape.dense_params / b.params
    read = dense * shape.weight_bytes / b.weight_bytes
    attention = shape.layers * shape.heads * shape.head_dim / (b.layers * b.heads * b.head_dim)
    kv = shape.kv_bytes_per_token() / b.kv_bytes_per_token()

    def scaled(tp: int, c: TPCoefficients) -> TPCoefficients:
        ctx = kv * (tp if shape.kv_entry else 1)
        p = c.prefill

        def decode(d: DecodeCoeffs) -> DecodeCoeffs:
            return DecodeCoeffs(d.c0 * read, d.per_ctx * ctx, d.per_req * dense)

        return TPCoefficients(PrefillCoeffs(p.c0 * layers, p.per_token * dense, p.per_sq * attention),
                              decode(c.decode_small), decode(c.decode_large), c.large_batch)

    smallest = min(base.by_tp)
    c = base.by_tp[smallest]
    expert_params = shape.moe_layers * shape.ffn_matrices * shape.hidden * shape.expert_ffn
    read_s = c.decode_small.c0 * smallest / b.params * shape.weight_bytes / b.weight_bytes * expert_params
    token_s = c.prefill.per_token * smallest / b.params * expert_params
    cost = ExpertCost(shape.experts, shape.top_k, shape.moe_layers, read_s, token_s, ACTIVATION_BYTES * shape.hidden,
                      imbalance, EXPERT_PRODUCT_S)
    degrees = sorted({*base.by_tp, *DEGREES})  # every one scaled here: a latent's KV term does not shrink with tp
    return LatencyModel(shape, {tp: scaled(tp, base.at(tp)) for tp in degrees},
                        source=f"{base.source} {b.name} scaled to {shape.name}", gpu_memory_gb=base.gpu_memory_gb,
                        parallel=base.parallel, experts=cost)
