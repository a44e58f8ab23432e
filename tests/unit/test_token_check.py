"""The deployment token check every internal server runs on every call (services/common/auth.py)."""

from distserve.v1 import kvxfer_pb2
from services.common.auth import (
    BODY_CREDENTIAL_METHODS,
    PRINCIPAL_KEY,
    TOKEN_KEY,
    TokenCheck,
    instance_principal,
    token_metadata,
    token_pair,
)

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


def test_a_body_credential_is_checked_as_the_metadata_token_is():
    check = TokenCheck(SECRET)
    principal, presented = token_pair(SECRET, instance_principal("d0"))
    assert (principal, presented) == tuple(value for _, value in token_metadata(SECRET, instance_principal("d0")))
    assert check.proves(principal, presented)
    assert not check.proves(instance_principal("p0"), presented)
    assert not check.proves(principal, token_pair(b"t" * 64, principal)[1])
    assert not check.proves("", presented) and not check.proves(principal, "")
    assert token_pair(None, principal) is None and token_metadata(None, principal) == ()


def test_the_body_credential_methods_are_kvxfers_pulls_and_carry_a_credential():
    service = kvxfer_pb2.DESCRIPTOR.services_by_name["KVXfer"]
    methods = {f"/{service.full_name}/{name}": service.methods_by_name[name] for name in ("Pull", "PullRanges")}
    assert BODY_CREDENTIAL_METHODS == set(methods)
    for method in methods.values():
        assert method.input_type.fields_by_name["credential"].message_type is kvxfer_pb2.Credential.DESCRIPTOR
