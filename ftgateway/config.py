"""The gateway's settings (one JSON file the role writes) and its API keys (a JSON file of hashes)."""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .sampling import BEAMS_MOST


@dataclass(frozen=True)
class Peer:
    url: str  # scheme://address:port of another host's gateway of the same model
    tls_name: str = ""  # the name in its certificate (the address is verified when empty)


def peers_of(raw: Any) -> tuple[Peer, ...]:
    """The setting 'peers' ([{url, tls_name}]) checked, or ValueError saying what is wrong."""
    if not isinstance(raw, list):
        raise ValueError(f"setting 'peers' must be a list of {{url, tls_name}}, got {raw!r}")
    found = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or set(item) - {"url", "tls_name"}:
            raise ValueError(f"setting 'peers'[{i}] must be {{url, tls_name}}, got {item!r}")
        url, name = item.get("url"), item.get("tls_name", "")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")) or not isinstance(name, str):
            raise ValueError(f"setting 'peers'[{i}]: url must be http(s)://address:port, got {url!r}")
        found.append(Peer(url.rstrip("/"), name))
    return tuple(found)


class ConfigError(ValueError):
    """A settings or key file that the gateway cannot start with: the message names the field."""


@dataclass(frozen=True)
class Settings:
    model: str  # the name clients send as "model" (fleet_model.name)
    triton_grpc: str = "127.0.0.1:8001"  # host:port of the local tritonserver's gRPC endpoint
    context_length: int = 1024  # prompt tokens + max_tokens may not exceed it (the model's positions)
    max_tokens_limit: int = 512  # the largest max_tokens a request may ask for
    max_best_of: int = BEAMS_MOST  # the largest best_of (or n): FT's beam width, which the GPU memory plan counts
    max_request_bytes: int = 65536  # a larger body gets a 413
    keys_file: str = ""  # JSON of key hashes; empty = no authentication (refused unless allow_anonymous)
    allow_anonymous: bool = False
    default_rate_per_minute: int = 600  # requests per key in any 60 s, unless the key says otherwise
    request_timeout_s: float = 300.0  # per call to tritonserver
    # Whether tritonserver marks a decoupled answer's last response (Triton 23.06 and later); the
    # role sets it from fleet_triton_container_version. False: the gateway reads the end from the
    # answer itself (triton.py, _answers).
    triton_final_response: bool = True
    # /v1/chat/completions: the model's chat template (Jinja, as transformers renders it; empty:
    # no chat) and the special tokens it may name.
    chat_template: str = ""
    chat_bos_token: str = ""
    chat_eos_token: str = ""
    # The checkpoint's directory: its tokenizer.json, used in the gateway where it equals the
    # preprocessing and postprocessing models (empty: always call them).
    tokenizer_dir: str = ""
    # The checkpoint's directory on this host, whatever tokenizes: its config.json and tokenizer
    # files name the special tokens whose text answers leave out (tokens.special_ids).
    checkpoint_dir: str = ""
    # Other hosts' gateways of the same model ([{url, tls_name}]), where a generation goes on when
    # the local tritonserver fails during it (continuing.py); the CA that verifies them over TLS
    # (empty: the system's); the fleet's key, which they and this gateway take on the internal
    # routes (a file holding it; empty: no continuations, internal routes refused); at most this
    # many continuations per request (0: none).
    peers: tuple = ()
    peer_ca_file: str = ""
    fleet_key_file: str = ""
    continuations: int = 2
    # Admission (admission.py): at most this many generations reach tritonserver at once (0: no
    # bound); a request waits at most admission_wait_ms for a slot (the fleet's time-to-first-
    # token objective), behind at most admission_queue others; otherwise it is refused at once.
    max_in_flight: int = 0
    admission_wait_ms: int = 1000
    admission_queue: int = 0
    # Rounds (rounds.py): at most this many new tokens per request to tritonserver, each
    # generation carried on from its tokens so far, the slices of a round sent together (0: each
    # generation whole, as FT runs it; the role's default, docs/gateway.md "Rounds").
    slice_tokens: int = 0
    # The fleet's objectives: an answer that met both counts in ftgateway_good_total (goodput).
    slo_ttft_ms: int = 1000
    slo_itl_ms: int = 100

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Settings:
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise ConfigError(f"unknown setting(s) {unknown}; known: {sorted(known)}")
        if not isinstance(raw.get("model"), str) or not raw["model"]:
            raise ConfigError("setting 'model' must be a non-empty string (the model name clients send)")
        for name in ("context_length", "max_tokens_limit", "max_request_bytes", "default_rate_per_minute"):
            value = raw.get(name, known[name].default)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"setting {name!r} must be a positive integer, got {value!r}")
        for name in ("continuations", "max_in_flight", "admission_wait_ms", "admission_queue", "slo_ttft_ms",
                     "slo_itl_ms", "slice_tokens"):  # fmt: skip
            value = raw.get(name, known[name].default)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"setting {name!r} must be a whole number >= 0, got {value!r}")
        try:
            raw = {**raw, "peers": peers_of(raw.get("peers", []))}
        except ValueError as err:
            raise ConfigError(str(err)) from err
        strings = ("chat_template", "chat_bos_token", "chat_eos_token", "tokenizer_dir", "checkpoint_dir",
                   "peer_ca_file", "fleet_key_file")  # fmt: skip
        typed = {**dict.fromkeys(strings, (str, "a string")), "triton_final_response": (bool, "true or false")}
        for name, (kind, said) in typed.items():
            if not isinstance(raw.get(name, known[name].default), kind):
                raise ConfigError(f"setting {name!r} must be {said}, got {raw[name]!r}")
        beams = raw.get("max_best_of", cls.max_best_of)
        if not isinstance(beams, int) or isinstance(beams, bool) or not 1 <= beams <= BEAMS_MOST:
            raise ConfigError(f"setting 'max_best_of' must be a whole number from 1 to {BEAMS_MOST} (FT's beam "
                              f"width), got {beams!r}")  # fmt: skip
        if raw.get("max_tokens_limit", cls.max_tokens_limit) >= raw.get("context_length", cls.context_length):
            raise ConfigError("setting 'max_tokens_limit' must be smaller than 'context_length' (room for a prompt)")
        settings = cls(**raw)
        if not settings.keys_file and not settings.allow_anonymous:
            raise ConfigError("no 'keys_file': set one, or 'allow_anonymous': true to serve without keys")
        return settings

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Settings:
        try:
            raw = json.loads(Path(path).read_text())
        except (OSError, ValueError) as err:
            raise ConfigError(f"cannot read the settings file {path}: {err}") from err
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: the settings must be a JSON object")
        return cls.from_dict(raw)


def hash_key(key: str) -> str:
    """What the hosts store of a key: its SHA-256, hex. Keys are long random strings (new_key),
    so a fast hash is enough; the plain key exists only in the inventory's vault and with the client."""
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    return "ftf-" + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Key:
    name: str
    sha256: str
    rate_per_minute: int
    models: tuple[str, ...] = ()  # the models it may use; empty: every model
    expires: float | None = None  # UNIX time from which it is refused; None: never

    def refusal(self, model: str, now: float) -> tuple[int, str, str] | None:
        """Why this key may not call `model` now, as (HTTP status, error code, message), or None."""
        if self.expires is not None and now >= self.expires:
            moment = datetime.datetime.fromtimestamp(self.expires, datetime.timezone.utc).isoformat()
            return 401, "expired_api_key", f"the API key {self.name!r} expired at {moment}"
        if self.models and model not in self.models:
            return 403, "model_not_allowed", f"the API key {self.name!r} may not use the model {model!r}"
        return None


class Keys:
    """The key file, read again whenever it changes on disk: issuing or revoking a key needs no restart."""

    def __init__(self, path: str, default_rate: int) -> None:
        self.path, self.default_rate = Path(path), default_rate
        self._stamp: tuple[int, int] | None = None
        self._by_hash: dict[str, Key] = {}
        self.reload()

    def reload(self) -> None:
        stat = self.path.stat()
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp == self._stamp:
            return
        self._by_hash = parse_keys(self.path.read_text(), self.default_rate, str(self.path))
        self._stamp = stamp

    def find(self, presented: str) -> Key | None:
        with contextlib.suppress(OSError, ConfigError):  # a key file being rewritten or broken:
            self.reload()  # keep serving with the keys read last
        digest = hash_key(presented)
        for known, key in self._by_hash.items():
            if hmac.compare_digest(known, digest):
                return key
        return None


def parse_keys(text: str, default_rate: int, where: str = "keys") -> dict[str, Key]:
    try:
        raw = json.loads(text)
    except ValueError as err:
        raise ConfigError(f"{where}: not JSON: {err}") from err
    if not isinstance(raw, dict) or not isinstance(raw.get("keys"), list):
        raise ConfigError(f'{where}: expected {{"keys": [{{"name": ..., "sha256": ...}}, ...]}}')
    keys: dict[str, Key] = {}
    for i, item in enumerate(raw["keys"]):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ConfigError(f"{where}: keys[{i}] needs a 'name'")
        digest = item.get("sha256")
        if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ConfigError(f"{where}: keys[{i}] ({item['name']}): 'sha256' must be 64 lowercase hex digits")
        rate = item.get("rate_per_minute", default_rate)
        if not isinstance(rate, int) or isinstance(rate, bool) or rate < 1:
            raise ConfigError(f"{where}: keys[{i}] ({item['name']}): 'rate_per_minute' must be a positive integer")
        models = item.get("models", [])
        if not isinstance(models, list) or not all(isinstance(m, str) and m for m in models):
            raise ConfigError(f"{where}: keys[{i}] ({item['name']}): 'models' must be a list of model names")
        expires = item.get("expires")
        if expires is not None:
            try:
                moment = datetime.datetime.fromisoformat(expires) if isinstance(expires, str) else None
            except ValueError:
                moment = None
            if moment is None or moment.tzinfo is None:
                raise ConfigError(f"{where}: keys[{i}] ({item['name']}): 'expires' must be ISO 8601 with a time "
                                  f"zone, got {expires!r}")  # fmt: skip
            expires = moment.timestamp()
        keys[digest] = Key(item["name"], digest, rate, tuple(models), expires)
    return keys
