"""The K/V a sliding-window model moves and holds as its prompt grows (docs/engine.md, "KV by layer group").

A prefill and a decode instance on real gRPC servers and a real kvxfer (both in this process): one request at a
time, prompts of 2x, 4x and 8x the window. Prints, per prompt, the bytes kvxfer pulled (its counter), what every
layer's every block would have been, and the decode pool's most blocks in use while the request decoded.
`python3 -m benchmarks.sliding_kv [--model tiny-gemma3] [--json]`
"""

from __future__ import annotations

import argparse
import asyncio
import json

from distserve.v1 import worker_pb2
from services.common.convert import sampling_to_proto
from services.common.model_config import ModelConfig
from services.common.sampling import SamplingParams
from services.engine.presets import resolve_model
from services.kvxfer.local import start_local_kvxfer
from tests.integration.kvxfer.multi_turn import Pair, start_pair

SAMPLING = sampling_to_proto(SamplingParams(max_tokens=32, temperature=0, ignore_eos=True))


async def _one(pair: Pair, request_id: str, prompt: list[int]) -> tuple[int, int]:
    """Bytes pulled for the request and the decode pool's most blocks in use while it decoded."""
    before = (await pair.kv.stats()).bytes_pulled
    prefilled = await pair.prefill.Prefill(worker_pb2.PrefillRequest(request_id=request_id, prompt_token_ids=prompt,
                                                                      sampling=SAMPLING))
    most = 0
    async for _ in pair.decode.Decode(worker_pb2.DecodeRequest(
            request_id=request_id, prompt_token_ids=prompt, first_token=prefilled.first_token, sampling=SAMPLING,
            kv=prefilled.kv)):
        most = max(most, (await pair.decode_engine.stats()).blocks_used)
    return (await pair.kv.stats()).bytes_pulled - before, most


async def main(model: str) -> list[dict]:
    folder = resolve_model(model)
    config = ModelConfig.from_folder(folder)
    window = config.sliding_window or 0
    if not window:
        raise SystemExit(f"{model} has no sliding layer")
    kvxfer = await start_local_kvxfer()
    pair = await start_pair(folder, kvxfer.address, "bench-sw", "off", num_blocks=512, block_size=4)
    rows = []
    try:
        layout, groups = pair.decode_engine.layout, pair.decode_engine.groups
        every_layer = layout.block_bytes // layout.num_layers * config.num_layers  # a block of every layer
        for times in (2, 4, 8):
            prompt = [1, *(3 + i % 250 for i in range(times * window + 1))]
            pulled, most = await _one(pair, f"sw{times}", prompt)
            rows.append({"prompt": len(prompt), "pulled_bytes": pulled,
                         "every_layer_bytes": groups.blocks_for(len(prompt)) * every_layer,
                         "decode_blocks_most": most, "decode_blocks_every_layer":
                             groups.blocks_for(len(prompt) + 32) * config.num_layers // layout.num_layers})
    finally:
        for close in pair.closers:
            await close()
        kvxfer.stop()
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny-gemma3")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(main(args.model))
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"{'prompt':>7} {'pulled B':>9} {'all layers B':>13} {'ratio':>6} {'decode blocks':>14} {'all layers':>11}")
        for r in result:
            print(f"{r['prompt']:>7} {r['pulled_bytes']:>9} {r['every_layer_bytes']:>13} "
                  f"{r['every_layer_bytes'] / r['pulled_bytes']:>6.2f} {r['decode_blocks_most']:>14} "
                  f"{r['decode_blocks_every_layer']:>11}")
