"""Errors the engine raises for bad input, naming the offending field."""


class EngineInputError(ValueError):
    """A request the engine refuses; `field` names what is wrong (maps to INVALID_ARGUMENT / HTTP 400)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
