"""The deployment token check every internal server runs on every call (services/common/auth.py)."""

from services.common.auth import PRINCIPAL_KEY, TOKEN_KEY, TokenCheck, instance_principal, token_metadata

SECRET = b"s" * 64
AGENT = ("user-agent", "grpc-python-asyncio")


def test_the_token_of_the_named_principal_passes_among_other_metadata():
    check = TokenCheck(SECRET)
    assert check.valid((AGENT, *token_metadata(SECRET, instance_principal("p0"))))
    assert check.valid((AGENT, *token_metadata(SECRET, instance_principal("p0"))))  # the cached token too


def test_a_token_is_refused_for_another_principal_or_from_another_secret():
    check = TokenCheck(SECRET)
    (_, p0_token) = token_metadata(SECRET, "instance:p0")[1]
    assert not check.valid(((PRINCIPAL_KEY, "instance:d0"), (TOKEN_KEY, p0_token)))
    assert not check.valid(token_metadata(b"t" * 64, "instance:p0"))


def test_missing_or_malformed_fields_are_refused():
    check = TokenCheck(SECRET)
    (_, p0_token) = token_metadata(SECRET, "instance:p0")[1]
    assert not check.valid(None)
    assert not check.valid((AGENT,))
    assert not check.valid(((TOKEN_KEY, p0_token),))
    assert not check.valid(((PRINCIPAL_KEY, "instance:p0"),))
    assert not check.valid(((PRINCIPAL_KEY, "instance:p0"), (TOKEN_KEY, p0_token.encode())))
