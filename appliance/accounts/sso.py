"""OpenID Connect single sign-on: the appliance as a confidential client of the organisation's provider.

The authorization code flow with PKCE (S256), a random state bound to the browser and a nonce bound
to the ID token. Authlib builds the authorization request and exchanges the code; joserfc (Authlib's
JOSE library) checks the ID token's signature against the provider's published keys and its issuer,
audience, nonce and expiry. Every way a provider can be misconfigured ends in a ProviderError whose
message names the setting to check; a person the settings do not admit gets SignInRefused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
import warnings

import httpx
import msgspec
from authlib.deprecate import AuthlibDeprecationWarning
from authlib.integrations.base_client import OAuthError
from joserfc import jwt
from joserfc.errors import (
    BadSignatureError,
    ExpiredTokenError,
    InvalidClaimError,
    JoseError,
    MissingClaimError,
)
from joserfc.jwk import KeySet

from appliance.accounts.bootstrap import DEFAULT_ADMIN_EMAIL
from appliance.config import ROLES, Settings, parse_domains, parse_role_groups
from appliance.errors import Forbidden, InvalidRequest, ServiceError

with warnings.catch_warnings():
    # Authlib warns that it will prefer the httpx2 fork; the appliance uses httpx throughout.
    warnings.simplefilter("ignore", AuthlibDeprecationWarning)
    from authlib.integrations.httpx_client import AsyncOAuth2Client

CALLBACK_PATH = "/login/sso/callback"
# The discovery document and keys are fetched again after this long (providers rotate keys).
METADATA_SECONDS = 3600
# A sign-in started longer ago than this is refused at the callback (start again).
PENDING_SECONDS = 600
HTTP_TIMEOUT = 10.0
ID_TOKEN_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
CLOCK_LEEWAY_SECONDS = 60
# Authorization errors that come from the person (cancelled, not allowed to use the client), not the setup.
PERSON_ERRORS = {"access_denied", "login_required", "consent_required", "interaction_required"}


class ProviderError(ServiceError):
    """The identity provider is unreachable or misconfigured, or the appliance's client settings are wrong."""

    status = 502


class SignInRefused(Forbidden):
    """The provider vouched for someone these settings do not admit (domain, role, no email)."""

    def __init__(self, message: str, email: str = ""):
        super().__init__(message)
        self.email = email


class Identity(msgspec.Struct, frozen=True):
    """A person the provider vouched for, with the role the settings give them (None: keep theirs)."""

    email: str
    role: str | None
    # The role a first sign-in gets (empty: only people with an account already may sign in).
    new_account_role: str


class Pending(msgspec.Struct, frozen=True):
    """What the browser carries between leaving for the provider and coming back (a signed cookie)."""

    state: str
    nonce: str
    verifier: str
    next: str
    started: float


class PendingSigner:
    """Signs the pending sign-in into a cookie value, so any appliance process can finish it."""

    def __init__(self, key: bytes):
        self.key = hmac.new(key, b"sso-pending", hashlib.sha256).digest()

    def dump(self, pending: Pending) -> str:
        payload = base64.urlsafe_b64encode(msgspec.json.encode(pending)).decode().rstrip("=")
        return f"{payload}.{self._mac(payload)}"

    def load(self, value: str) -> Pending | None:
        payload, _, mac = value.partition(".")
        if not mac or not hmac.compare_digest(mac, self._mac(payload)):
            return None
        try:
            pending = msgspec.json.decode(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)), type=Pending)
        except (ValueError, msgspec.DecodeError):
            return None
        return pending if time.time() - pending.started <= PENDING_SECONDS else None

    def _mac(self, payload: str) -> str:
        return hmac.new(self.key, payload.encode(), hashlib.sha256).hexdigest()


def role_for(groups: list[str], role_groups: dict[str, str]) -> str | None:
    """The highest role any of the groups gives, or None."""
    given = {role_groups[g] for g in groups if g in role_groups}
    return next((role for role in ROLES if role in given), None)


class OidcClient:
    def __init__(self, settings: Settings, signing_key: bytes):
        self.settings = settings
        self.issuer = settings.sso_issuer.rstrip("/")
        self.redirect_uri = settings.base_url + CALLBACK_PATH
        self.signer = PendingSigner(signing_key)
        self.domains = parse_domains(settings.sso_allowed_domains)
        self.role_groups = parse_role_groups(settings.sso_role_groups)
        self._metadata: dict | None = None
        self._keys: KeySet | None = None
        self._fetched_at = 0.0

    # -- the provider's metadata ------------------------------------------------------------------

    async def _get_json(self, url: str, what: str) -> dict:
        try:
            async with httpx.AsyncClient(timeout=HTTP_TIMEOUT) as client:
                response = await client.get(url, headers={"accept": "application/json"})
        except httpx.HTTPError as exc:
            raise ProviderError(
                f"The identity provider cannot be reached: fetching its {what} at {url} failed ({exc!r}). "
                "Check sso_issuer and that this server can reach the provider."
            ) from None
        if response.status_code != 200:
            raise ProviderError(
                f"The identity provider answered HTTP {response.status_code} for its {what} at {url}. "
                "Check sso_issuer (the URL before /.well-known/openid-configuration)."
            )
        try:
            document = response.json()
        except ValueError:
            document = None
        if not isinstance(document, dict):
            raise ProviderError(f"The identity provider's {what} at {url} is not a JSON object.")
        return document

    async def metadata(self) -> dict:
        if self._metadata is not None and time.monotonic() - self._fetched_at < METADATA_SECONDS:
            return self._metadata
        url = self.issuer + "/.well-known/openid-configuration"
        document = await self._get_json(url, "discovery document")
        if str(document.get("issuer", "")).rstrip("/") != self.issuer:
            raise ProviderError(
                f"The discovery document at {url} names the issuer {document.get('issuer')!r}, "
                f"not the configured sso_issuer {self.settings.sso_issuer!r}; they must be the same URL."
            )
        missing = [k for k in ("authorization_endpoint", "token_endpoint", "jwks_uri") if not document.get(k)]
        if missing:
            raise ProviderError(f"The discovery document at {url} lacks {', '.join(missing)}.")
        self._metadata, self._keys, self._fetched_at = document, None, time.monotonic()
        return document

    async def _key_set(self, refresh: bool = False) -> KeySet:
        if self._keys is None or refresh:
            uri = (await self.metadata())["jwks_uri"]
            try:
                self._keys = KeySet.import_key_set(await self._get_json(uri, "signing keys (jwks_uri)"))
            except (JoseError, ValueError, KeyError, TypeError) as exc:
                raise ProviderError(f"The identity provider's signing keys at {uri} cannot be read ({exc}).") from None
        return self._keys

    def _client(self, metadata: dict) -> AsyncOAuth2Client:
        methods = metadata.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
        return AsyncOAuth2Client(
            client_id=self.settings.sso_client_id,
            client_secret=self.settings.sso_client_secret,
            scope=self.settings.sso_scopes,
            redirect_uri=self.redirect_uri,
            code_challenge_method="S256",
            token_endpoint_auth_method="client_secret_basic"
            if "client_secret_basic" in methods
            else "client_secret_post",
            timeout=HTTP_TIMEOUT,
        )

    # -- the flow ----------------------------------------------------------------------------------

    async def begin(self, next_path: str) -> tuple[str, str]:
        """The provider's authorization URL to send the browser to, and the cookie value to set."""
        metadata = await self.metadata()
        pending = Pending(
            state=secrets.token_urlsafe(24),
            nonce=secrets.token_urlsafe(24),
            verifier=secrets.token_urlsafe(48),
            next=next_path,
            started=time.time(),
        )
        async with self._client(metadata) as client:
            url, _ = client.create_authorization_url(
                metadata["authorization_endpoint"],
                state=pending.state,
                code_verifier=pending.verifier,
                nonce=pending.nonce,
            )
        return url, self.signer.dump(pending)

    async def finish(self, params: dict[str, str], cookie: str | None) -> tuple[Identity, Pending]:
        """Check the provider's answer at the callback and return whom it vouches for."""
        pending = self.signer.load(cookie) if cookie else None
        if pending is None or not hmac.compare_digest(params.get("state", ""), pending.state):
            raise InvalidRequest("This sign-in link has expired or was not started in this browser. Sign in again.")
        if params.get("error"):
            detail = f"{params['error']}: {params.get('error_description') or 'no description'}"
            if params["error"] in PERSON_ERRORS:
                raise SignInRefused(f"The sign-in was not completed at the identity provider ({detail}).")
            raise ProviderError(
                f"The identity provider refused the sign-in request ({detail}). "
                "Check sso_scopes and the client's settings at the provider."
            )
        metadata = await self.metadata()
        # RFC 9207: a provider that names itself in the answer must be ours (no mix-up with another).
        if params.get("iss") and params["iss"].rstrip("/") != self.issuer:
            raise ProviderError(f"The answer came from the issuer {params['iss']!r}, not {self.issuer!r}.")
        if not params.get("code"):
            raise InvalidRequest("The identity provider sent no authorization code. Sign in again.")
        async with self._client(metadata) as client:
            try:
                token = await client.fetch_token(
                    metadata["token_endpoint"], code=params["code"], code_verifier=pending.verifier
                )
            except OAuthError as exc:
                raise ProviderError(self._token_error(exc.error, exc.description)) from None
            except (httpx.HTTPError, ValueError) as exc:
                raise ProviderError(f"The identity provider's token endpoint failed ({exc}).") from None
            if not token.get("id_token"):
                raise ProviderError("The identity provider sent no ID token: is openid in sso_scopes?")
            claims = await self.verify_id_token(token["id_token"], pending.nonce)
            claims = await self._with_userinfo(client, metadata, claims, token)
        return self.admit(claims), pending

    def _token_error(self, error: str, description: str | None) -> str:
        detail = f"{error}: {description}" if description else error
        if error in ("invalid_client", "unauthorized_client"):
            return (
                f"The identity provider refused the appliance's client credentials ({detail}). "
                "Check sso_client_id and sso_client_secret against the client registered at the provider."
            )
        if error == "invalid_grant":
            return (
                f"The identity provider refused the sign-in code ({detail}). Check that the client's redirect URI "
                f"is {self.redirect_uri} and sign in again."
            )
        return f"The identity provider refused to exchange the sign-in code ({detail})."

    async def verify_id_token(self, id_token: str, nonce: str) -> dict:
        """The ID token's claims once its signature, issuer, audience, nonce and expiry check out."""
        try:
            try:
                token = jwt.decode(id_token, await self._key_set(), algorithms=ID_TOKEN_ALGORITHMS)
            except (BadSignatureError, ValueError, JoseError):
                # A key rotated since the keys were fetched: fetch them once more before refusing.
                token = jwt.decode(id_token, await self._key_set(refresh=True), algorithms=ID_TOKEN_ALGORITHMS)
        except (BadSignatureError, ValueError, JoseError) as exc:
            raise ProviderError(
                f"The ID token's signature does not verify against the provider's keys ({exc.__class__.__name__})."
            ) from None
        claims = token.claims
        registry = jwt.JWTClaimsRegistry(
            leeway=CLOCK_LEEWAY_SECONDS,
            iss={"essential": True, "value": self.issuer},
            aud={"essential": True, "value": self.settings.sso_client_id},
            sub={"essential": True},
            exp={"essential": True},
            nonce={"essential": True, "value": nonce},
        )
        try:
            registry.validate(claims)
        except (InvalidClaimError, MissingClaimError) as exc:
            raise ProviderError(self._claim_error(exc.claim, claims)) from None
        except ExpiredTokenError:
            raise ProviderError("The ID token has expired: check that this server's clock is right.") from None
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        if len(audiences) > 1 and claims.get("azp") != self.settings.sso_client_id:
            raise ProviderError(self._claim_error("aud", claims))
        return claims

    def _claim_error(self, claim: str, claims: dict) -> str:
        if claim == "iss":
            return (
                f"The ID token was issued by {claims.get('iss')!r}, not by the configured sso_issuer "
                f"{self.settings.sso_issuer!r}."
            )
        if claim == "aud":
            return (
                f"The ID token is meant for {claims.get('aud')!r}, not for this appliance's sso_client_id "
                f"{self.settings.sso_client_id!r}."
            )
        if claim == "nonce":
            return "The ID token does not answer this sign-in (its nonce differs). Sign in again."
        return f"The ID token's {claim} claim is missing or wrong."

    async def _with_userinfo(self, client: AsyncOAuth2Client, metadata: dict, claims: dict, token: dict) -> dict:
        """Providers may keep email and groups out of the ID token: ask the userinfo endpoint for the rest."""
        wanted = ("email", self.settings.sso_groups_claim)
        if all(k in claims for k in wanted) or not metadata.get("userinfo_endpoint") or not token.get("access_token"):
            return claims
        try:
            response = await client.get(metadata["userinfo_endpoint"])
            info = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            info = None
        if not isinstance(info, dict):
            raise ProviderError(f"The identity provider's userinfo endpoint {metadata['userinfo_endpoint']} failed.")
        if info.get("sub") != claims["sub"]:
            raise ProviderError("The userinfo endpoint answered for another subject than the ID token.")
        return {**info, **claims}

    # -- whom the settings admit -------------------------------------------------------------------

    def admit(self, claims: dict) -> Identity:
        email = claims.get("email")
        if not isinstance(email, str) or "@" not in email:
            raise SignInRefused(
                "The identity provider sent no email address for you, so no account can be matched. "
                "IT: include the email scope in sso_scopes and release the email claim to this client."
            )
        email = email.strip().lower()
        if claims.get("email_verified") is False:
            raise SignInRefused(f"The identity provider has not verified {email}.", email)
        domain = email.rpartition("@")[2]
        if self.domains and domain not in self.domains:
            raise SignInRefused(
                f"Accounts at {domain} may not sign in here (allowed: {', '.join(self.domains)}).", email
            )
        groups = claims.get(self.settings.sso_groups_claim) or []
        groups = [groups] if isinstance(groups, str) else [str(g) for g in groups if isinstance(g, str | int)]
        if not self.role_groups:
            # No mapping: roles are kept in the appliance; a first sign-in gets the default role.
            return Identity(email=email, role=None, new_account_role=self.settings.sso_default_role)
        # With a mapping the provider's groups decide the role at every sign-in.
        role = role_for(groups, self.role_groups) or self.settings.sso_default_role
        if not role:
            raise SignInRefused("You are in none of the groups that give access to this appliance.", email)
        return Identity(email=email, role=role, new_account_role=role)


def summary(settings: Settings) -> dict:
    """The SSO settings as Admin → Settings shows them (never the client secret)."""
    return {
        "enabled": bool(settings.sso_issuer),
        "issuer": settings.sso_issuer,
        "client_id": settings.sso_client_id,
        "secret_set": bool(settings.sso_client_secret),
        "scopes": settings.sso_scopes,
        "name": settings.sso_name,
        "domains": parse_domains(settings.sso_allowed_domains),
        "groups_claim": settings.sso_groups_claim,
        "role_groups": parse_role_groups(settings.sso_role_groups),
        "default_role": settings.sso_default_role,
        "password_login": settings.password_login,
        "break_glass_email": break_glass_email(settings),
        "redirect_uri": settings.base_url + CALLBACK_PATH,
    }


def break_glass_email(settings: Settings) -> str:
    return (settings.break_glass_email or settings.admin_email or DEFAULT_ADMIN_EMAIL).strip().lower()
