"""What `AgentPlugin` gives a Worker and a Client, read from the configuration they run with."""

from __future__ import annotations

import base64
import json
import os
import sys
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Worker

from activities.plugin import AgentPlugin, heartbeat_tuning
from runtime.connect import data_converter
from runtime.settings import Settings
from tests.fakes import FakeAgentActivities
from tests.helpers import worker_for
from workflows import names
from workflows.converter import AgentPayloadConverter
from workflows.people.notifications import AgentNotification
from workflows.run.agent import AgentWorkflow


async def test_a_worker_gets_the_workflow_the_activities_and_the_heartbeat_tuning(
    client, task_queue, tmp_path
):
    plugin = AgentPlugin(settings=Settings.from_env({"AGENT_WORKSPACE": str(tmp_path / "ws")}))
    config = Worker(client, task_queue=task_queue, plugins=[plugin]).config(active_config=True)
    assert list(config["workflows"]) == [AgentWorkflow, AgentNotification]
    registered = [getattr(a, "__temporal_activity_definition").name for a in config["activities"]]
    assert registered == [
        names.ACTIVITY_WORKER_SETUP,
        names.ACTIVITY_CALL_LLM,
        names.ACTIVITY_SUMMARIZE,
        names.ACTIVITY_EXECUTE_TOOL,
        names.ACTIVITY_NOTIFY,
        names.ACTIVITY_VERIFY_ANSWER,
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
    assert connected.data_converter.payload_converter_class is AgentPayloadConverter


async def test_a_client_keeps_the_agent_s_converter_it_was_given(client):
    """The converter parameter is applied to what the client has: a converter of the agent's
    kind built with a key of its own stays, instead of one read from the environment."""
    keyed = data_converter({"AGENT_ENCRYPTION_KEY": base64.b64encode(os.urandom(32)).decode()})
    connected = await Client.connect(
        client.service_client.config.target_host,
        namespace=client.namespace,
        data_converter=keyed,
        plugins=[AgentPlugin(activities=[])],
    )
    assert connected.data_converter is keyed


async def test_one_plugin_starts_its_mcp_servers_again_after_closing(tmp_path):
    config = tmp_path / "mcp.json"
    server = str(Path(sys.executable).parent / "mcp-server-time")
    config.write_text(json.dumps({"mcpServers": {"time": {"command": server}}}))
    environ = {"AGENT_WORKSPACE": str(tmp_path / "ws"), "AGENT_MCP_CONFIG": str(config)}
    plugin = AgentPlugin(settings=Settings.from_env(environ))
    for _ in range(2):  # e.g. two workers in a row, each starting and stopping the servers
        await plugin.start()
        assert plugin.tool_names[-2:] == ["time__get_current_time", "time__convert_time"]
        tool = plugin.registry.get("time__get_current_time")
        assert tool is not None
        assert (await tool.run({"timezone": "UTC"}))["timezone"] == "UTC"
        await plugin.aclose()
