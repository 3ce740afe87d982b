"""How every program of this project connects to Temporal: `temporalio.envconfig` (TEMPORAL_ADDRESS,
TEMPORAL_NAMESPACE, TLS, API key, profiles in temporal.toml) with `localhost:7233` as the default,
and the data converter of `data_converter()`. The worker, the starter and the tests all come
through here.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, DefaultFailureConverterWithEncodedAttributes
from temporalio.envconfig import ClientConfig
from temporalio.runtime import Runtime

from runtime.codec import EncryptionCodec, parse_keys
from runtime.payload_store import external_storage
from runtime.seal_binding import SealBindingInterceptor
from runtime.store_log import log_store_failures_once
from runtime.tracing import client_interceptors, install_tracing
from workflows.converter import AgentPayloadConverter
from workflows.names import DEFAULT_TASK_QUEUE

DEFAULT_ADDRESS = "localhost:7233"


def task_queue() -> str:
    return os.environ.get("AGENT_TASK_QUEUE") or DEFAULT_TASK_QUEUE


def connect_config(profile: str | None = None) -> dict[str, object]:
    config = dict(ClientConfig.load_client_connect_config(profile=profile))
    config.setdefault("target_host", DEFAULT_ADDRESS)
    config.setdefault("namespace", "default")
    return config


def data_converter(environ: Mapping[str, str] | None = None) -> DataConverter:
    """The one data converter of every client and worker of the project: pydantic, and with a key
    (AGENT_ENCRYPTION_KEY or AGENT_ENCRYPTION_KEYS) the AES-256-GCM codec over every payload and
    over the failures' messages and stack traces. Without a key, payloads are written exactly as
    before; the codec is still there to name the key id of an encrypted payload it meets.

    With AGENT_PAYLOAD_STORE, payloads of 256 KiB and more go to that store and history holds a
    reference (`runtime.payload_store`). The SDK applies the codec first and the store second,
    so with a key the store only ever receives sealed payloads. A converter with a store also
    makes the worker log a failing store once per run (`runtime.store_log`).

    Raises SettingError (a ValueError naming the variable: KeyConfigError for a key,
    PayloadStoreConfigError for a store) for a setting that cannot be used.
    """
    env = os.environ if environ is None else environ
    keyring = parse_keys(env)
    storage = external_storage(env)
    if storage is not None:
        log_store_failures_once()
    base = dataclasses.replace(
        pydantic_data_converter,
        payload_converter_class=AgentPayloadConverter,
        external_storage=storage,
    )
    if keyring is None:
        return dataclasses.replace(base, payload_codec=EncryptionCodec(None))
    return dataclasses.replace(
        base,
        payload_codec=EncryptionCodec(keyring, mark_plaintext=True),
        failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
    )


def binding_interceptors(environ: Mapping[str, str] | None = None) -> list[SealBindingInterceptor]:
    """With a key, the interceptor that seals what a client sends for the run and handler it
    goes to (`runtime.seal_binding`); without one, nothing (nothing is sealed)."""
    env = os.environ if environ is None else environ
    return [SealBindingInterceptor()] if parse_keys(env) is not None else []


async def connect(profile: str | None = None, *, runtime: Runtime | None = None) -> Client:
    """A client of the project: the connection settings, the data converter, and with
    OTEL_EXPORTER_OTLP_ENDPOINT the tracing interceptor (the process's tracer provider is set up
    here unless the program did it first). `runtime`: the SDK runtime (the worker's serves its
    metrics); default: the process's. Raises SettingError for a setting it cannot use."""
    config = connect_config(profile)
    converter = data_converter()
    install_tracing()
    return await Client.connect(
        str(config.pop("target_host")),
        data_converter=converter,
        interceptors=[*binding_interceptors(), *client_interceptors()],
        runtime=runtime,
        **config,  # type: ignore[arg-type]
    )
