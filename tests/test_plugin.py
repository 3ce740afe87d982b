"""What `AgentPlugin` gives a Worker and a Client, read from the configuration they run with."""

from __future__ import annotations

from datetime import timedelta

from temporalio.client import Client
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.worker import Worker

from activities.plugin import AgentPlugin, heartbeat_tuning
from activities.settings import Settings
from tests.fakes import FakeAgentActivities
from tests.helpers import worker_for
from workflows import names
from workflows.agent import AgentWorkflow


async def test_a_worker_gets_the_workflow_the_activities_and_the_heartbeat_tuning(
    client, task_queue, tmp_path
):
    plugin = AgentPlugin(settings=Settings.from_env({"AGENT_WORKSPACE": str(tmp_path / "ws")}))
    config = Worker(client, task_queue=task_queue, plugins=[plugin]).config(active_config=True)
    assert list(config["workflows"]) == [AgentWorkflow]
    registered = [getattr(a, "__temporal_activity_definition").name for a in config["activities"]]
    assert registered == [
        names.ACTIVITY_LIST_TOOLS,
        names.ACTIVITY_CALL_LLM,
        names.ACTIVITY_EXECUTE_TOOL,
    ]
    for key, value in heartbeat_tuning().items():
        assert config[key] == value  # type: ignore[literal-required]


async def test_the_tests_worker_helper_has_the_tuning_and_keeps_a_tighter_one(client, task_queue):
    fake = FakeAgentActivities()
    config = worker_for(client, task_queue, fake).config(active_config=True)
    assert config["max_heartbeat_throttle_interval"] == timedelta(milliseconds=500)
    tight = timedelta(milliseconds=100)
    config = worker_for(
        client, f"{task_queue}-tight", fake, max_heartbeat_throttle_interval=tight
    ).config(active_config=True)
    assert config["max_heartbeat_throttle_interval"] == tight


async def test_a_client_gets_the_agent_s_data_converter(client):
    plugin = AgentPlugin(activities=[])
    connected = await Client.connect(
        client.service_client.config.target_host, namespace=client.namespace, plugins=[plugin]
    )
    assert connected.data_converter.payload_converter_class is PydanticPayloadConverter
