"""How every program of this project connects to Temporal: `temporalio.envconfig` (TEMPORAL_ADDRESS,
TEMPORAL_NAMESPACE, TLS, API key, profiles in temporal.toml) with `localhost:7233` as the default,
and the pydantic data converter. The worker, the starter and the tests all come through here.
"""

from __future__ import annotations

import os

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.envconfig import ClientConfig

from workflows.names import DEFAULT_TASK_QUEUE

DEFAULT_ADDRESS = "localhost:7233"


def task_queue() -> str:
    return os.environ.get("AGENT_TASK_QUEUE") or DEFAULT_TASK_QUEUE


def connect_config(profile: str | None = None) -> dict[str, object]:
    config = dict(ClientConfig.load_client_connect_config(profile=profile))
    config.setdefault("target_host", DEFAULT_ADDRESS)
    config.setdefault("namespace", "default")
    return config


async def connect(profile: str | None = None) -> Client:
    config = connect_config(profile)
    return await Client.connect(
        str(config.pop("target_host")),
        data_converter=pydantic_data_converter,
        **config,  # type: ignore[arg-type]
    )
