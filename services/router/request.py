"""A generation request as the router handles it, built and validated from either front end."""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass, field, replace

from services.common.chat_template import ChatTemplate, plain_chat_template
from services.common.errors import EngineInputError
from services.common.generation_config import SamplingDefaults
from services.common.model_config import ModelConfig
from services.common.sampling import MAX_N, SamplingParams, choice_seed
from services.common.slo import SLO
from services.common.stamps import Lifetime
from services.common.tokenizer import Tokenizer
from services.common.validation import validate_request
from services.router.admission import Prediction
from services.router.choices import SharedPrefill
from services.router.paths import Route
from services.router.prefix_routing import PrefillPick

MAX_REQUEST_ID_CHARS = 128
MAX_CACHE_SALT_CHARS = 256


def cache_namespace(tenant: str, cache_salt: str | None) -> str:
    """The prefix-cache namespace of a tenant's request: requests share cached K/V only within one tenant (its API
    key's identity, `ApiKeys.tenant`) and salt, so that no one can time another's prompts. Raises EngineInputError
    for a bad salt."""
    if cache_salt is not None and not 1 <= len(cache_salt) <= MAX_CACHE_SALT_CHARS:
        raise EngineInputError("cache_salt", f"must be 1 to {MAX_CACHE_SALT_CHARS} characters when given")
    if cache_salt is None:
        return tenant and f"tenant:{tenant}"
    return f"tenant:{tenant}\x00salt:{cache_salt}"


@dataclass(slots=True)
class RouterRequest:
    request_id: str  # unique in this router: the key downstream
    prompt_ids: list[int]
    params: SamplingParams
    lifetime: Lifetime = field(default_factory=Lifetime)
    prefill_instance: str = ""
    decode_instance: str = ""
    deadline: float | None = None  # time.monotonic() by which the client wants the answer
    attempt: int = 0  # retries after an instance failure; each attempt is a new request downstream
    n: int = 1  # independent samples (choices) of the prompt
    index: int = 0  # a choice: its index
    shared: SharedPrefill | None = None  # a choice: the prefill its first attempt decodes from
    label: str = ""  # the client's own id, echoed back; two requests may share one
    slo: SLO | None = None  # as requested, then with the router's defaults filled in at admission
    prediction: Prediction | None = None  # TTFT/TPOT predicted at admission (None: no fitted model)
    best_effort: bool = False  # admitted although predicted to miss its SLO
    cache_namespace: str = ""  # prefix caching: its tenant and salt (`cache_namespace`); "" shares with all
    cached_tokens: int = 0  # prompt tokens not computed: the prefill's (or a local prefill's) cache had them
    decode_cached_tokens: int = 0  # prompt tokens the decode instance's cache held, so not pulled (delta, reverse)
    path: str = "pull"  # the way its K/V went to decode (router/paths.py), after any fallback
    prefill_pick: PrefillPick | None = None  # routing by the model: the prefill instance chosen at arrival
    route: Route = Route("pull")  # ... and the decode instance and the path its K/V takes (router/paths.py)

    @property
    def public_id(self) -> str:
        return self.label or self.request_id

    @property
    def downstream_id(self) -> str:
        return self.request_id if self.attempt == 0 else f"{self.request_id}~{self.attempt}"

    def choice(self, index: int, shared: SharedPrefill | None) -> RouterRequest:
        """Choice `index` of an n > 1 request: its own id downstream and seed; the same lifetime."""
        params = replace(self.params, seed=choice_seed(self.params.seed or 0, index))
        return replace(self, request_id=f"{self.request_id}-{index}", params=params, n=1, index=index, shared=shared)

    def record(self, n_tokens: int, mode: str) -> dict[str, str | int | float]:
        """Its entry in the request stream (`ds:requests`): the client's id is `label`, ours `request_id`."""
        return {"request_id": self.request_id, "label": self.label, "prompt_tokens": len(self.prompt_ids),
                "output_tokens": n_tokens, "cached_tokens": self.cached_tokens,
                "decode_cached_tokens": self.decode_cached_tokens, "path": self.path,
                "prefill_instance": self.prefill_instance,
                "decode_instance": self.decode_instance, "mode": mode, "seed": self.params.seed,
                **self.lifetime.to_record(), **(self.prediction.to_record() if self.prediction else {})}

    def remaining(self) -> float | None:
        """Seconds left before the client's deadline (passed on to every downstream call)."""
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())


@dataclass(frozen=True, slots=True)
class RequestBuilder:
    """Tokenizes and validates; raises EngineInputError naming the field."""

    config: ModelConfig
    tokenizer: Tokenizer
    model_name: str
    max_prompt_chars: int
    chat: ChatTemplate = field(default_factory=plain_chat_template)
    sampling: SamplingDefaults = SamplingDefaults()  # what requests that omit these fields sample with
    report_cached_tokens: bool = True  # False: clients are told 0 cached tokens (the router setting)

    def build(self, *, prompt: str, prompt_ids: list[int], params: SamplingParams, model: str = "",
              request_id: str = "", timeout_s: float | None = None, n: int = 1, tenant: str = "",
              cache_salt: str | None = None) -> RouterRequest:
        self.check_model(model)
        if prompt and prompt_ids:
            raise EngineInputError("prompt", "give prompt or prompt_token_ids, not both")
        if len(request_id) > MAX_REQUEST_ID_CHARS:
            raise EngineInputError("request_id", f"longer than {MAX_REQUEST_ID_CHARS} characters")
        self.check_text(prompt)
        if not 1 <= n <= MAX_N:
            raise EngineInputError("n", f"must be in [1, {MAX_N}], got {n}")
        namespace = cache_namespace(tenant, cache_salt)
        ids = list(prompt_ids) if prompt_ids else (self.tokenizer.encode(prompt) if prompt else [])
        validate_request(self.config, ids, params)
        if params.seed is None:
            # Drawn here, once, and kept with the request: every attempt downstream continues the same sample.
            params = replace(params, seed=random.getrandbits(63))
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        return RouterRequest(uuid.uuid4().hex, ids, params, deadline=deadline, label=request_id, n=n,
                             cache_namespace=namespace)

    def chat_prompt(self, messages: list[dict], **kwargs) -> list[int]:
        """The prompt ids of chat messages through the model's chat template (`kwargs`: `ChatTemplate.render`'s:
        tools, documents, add_generation_prompt, continue_final_message, the template's own variables)."""
        text = self.chat.render(messages, **kwargs)
        self.check_text(text, "messages")
        return self.chat.encode(self.tokenizer, text)

    def check_model(self, model: str) -> None:
        """An empty name means the one model served."""
        if model and model != self.model_name:
            raise EngineInputError("model", f"unknown model {model!r}; this router serves {self.model_name!r}")

    def check_text(self, text: str, name: str = "prompt") -> None:
        """Text the tokenizer can take: valid Unicode, and no longer than the router accepts."""
        if not text.isascii():
            try:  # JSON may carry a lone UTF-16 surrogate, which no tokenizer can encode
                text.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise EngineInputError(name, f"not valid Unicode: a lone surrogate at character {exc.start}") from None
        if len(text) > self.max_prompt_chars:
            raise EngineInputError(name, f"longer than {self.max_prompt_chars} characters")
