"""Request checks shared by the engine and the router, so bad input is refused before anything is allocated."""

from __future__ import annotations

from services.common.errors import EngineInputError
from services.common.model_config import ModelConfig
from services.common.sampling import SamplingParams


def validate_request(config: ModelConfig, prompt_ids: list[int], params: SamplingParams) -> None:
    """Raises EngineInputError naming the field when the model cannot serve the request."""
    if not prompt_ids:
        raise EngineInputError("prompt", "must not be empty")
    if any(not isinstance(t, int) or not 0 <= t < config.vocab_size for t in prompt_ids):
        raise EngineInputError("prompt_token_ids", f"ids must be integers in [0, {config.vocab_size})")
    if len(prompt_ids) >= config.max_position:
        raise EngineInputError("prompt", f"{len(prompt_ids)} tokens leave no room to generate within the model's "
                                         f"max_model_len of {config.max_position}")
    params.validate()
    if not 0 <= params.resumed_tokens < len(prompt_ids):
        raise EngineInputError("resumed_tokens", f"must be in [0, {len(prompt_ids)}) (the prompt's length)")
    for name, ids in (("logit_bias", [t for t, _ in params.logit_bias]), ("stop_token_ids", params.stop_token_ids)):
        if any(t >= config.vocab_size for t in ids):
            raise EngineInputError(name, f"token ids must be < {config.vocab_size}")
    if len(prompt_ids) + params.max_tokens > config.max_position:
        raise EngineInputError(
            "max_tokens",
            f"prompt ({len(prompt_ids)} tokens) + max_tokens ({params.max_tokens}) exceeds the model's max_model_len "
            f"of {config.max_position}")
