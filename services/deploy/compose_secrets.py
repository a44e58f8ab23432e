"""The credentials of a compose deployment, mounted as compose secrets (read-only files under /run/secrets).

Every distserve service gets the deployment secret (internal tokens, kvxfer owners, Redis's password); the
router its client API keys, the planner its admin keys, Redis its ACL file. Where internal traffic crosses hosts (more than one
node), every service, Redis included, also gets the deployment's CA and a certificate and key for mutual TLS.
"""

from __future__ import annotations

from services.common.secret import SECRET_ENV
from services.common.tls import ENV as TLS_ENV

RUN = "/run/secrets"
FILES = {  # secret → its file on the host where compose runs (a compose variable with a default)
    "distserve_secret": "${DISTSERVE_SECRET_FILE:-./secrets/deployment-secret}",
    "distserve_api_keys": "${DISTSERVE_API_KEY_FILE:-./secrets/api-keys}",
    "distserve_admin_keys": "${DISTSERVE_ADMIN_KEY_FILE:-./secrets/planner-admin-keys}",
    "distserve_redis_acl": "${DISTSERVE_REDIS_ACL_FILE:-./secrets/redis.acl}",
    "distserve_tls_ca": "${DISTSERVE_TLS_DIR:-./secrets/tls}/ca.pem",
    "distserve_tls_cert": "${DISTSERVE_TLS_DIR:-./secrets/tls}/node.pem",
    "distserve_tls_key": "${DISTSERVE_TLS_DIR:-./secrets/tls}/node.key",
}
TLS = {"ca": "distserve_tls_ca", "cert": "distserve_tls_cert", "key": "distserve_tls_key"}
REDIS_ACL = "distserve_redis_acl"  # Redis's users and password (`distserve redis-acl`), mounted by Redis only


def with_credentials(service: dict, tls: bool, *extra: str) -> dict:
    """`service` with the deployment secret (and `extra` secrets, and the TLS files when `tls`) mounted and named
    in its environment."""
    names = ["distserve_secret", *extra, *(TLS.values() if tls else ())]
    environment = {**service.get("environment", {}), SECRET_ENV: f"{RUN}/distserve_secret"}
    if tls:
        environment.update({TLS_ENV[field]: f"{RUN}/{name}" for field, name in TLS.items()})
    return {**service, "secrets": names, "environment": environment}


def secrets_section(tls: bool) -> dict:
    names = [n for n in FILES if tls or n not in TLS.values()]
    return {name: {"file": FILES[name]} for name in names}
