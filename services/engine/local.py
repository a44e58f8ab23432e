"""In-process generation with no services (`distserve generate --local`): the reference the stack must equal."""

from __future__ import annotations

from services.common.sampling import SamplingParams
from services.common.tokenizer import load_tokenizer
from services.engine.device import setup_device
from services.engine.engine import EngineConfig, LLMEngine


def generate_local(model: str, device: str, prompt: str, params: SamplingParams, tp: int = 1, pp: int = 1,
                   devices: tuple[str, ...] = (), ep: int = 0) -> dict:
    """Generates for one prompt (on TP x PP rank processes when either is > 1, `ep` expert groups; 0: EP = TP);
    returns {token_ids, text, prompt_token_ids}."""
    dev = setup_device(devices[0] if devices else device)
    tokenizer = load_tokenizer(model)
    prompt_ids = tokenizer.encode(prompt)
    engine = LLMEngine(EngineConfig(model, policy="colocated", device=device, num_blocks=512, tp=tp, pp=pp,
                                    ep=ep, devices=devices), dev)
    try:
        (token_ids,) = engine.generate([prompt_ids], params)
    finally:
        engine.close()
    return {"prompt_token_ids": prompt_ids, "token_ids": token_ids, "text": tokenizer.decode(token_ids)}
