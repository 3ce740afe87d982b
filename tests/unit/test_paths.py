"""Paths mean one thing: a path parameter as rules see it (`workflows.gate.paths`), and the docs'
"secrets stay on the worker" rule against every spelling of `.env`. Pure: no server."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workflows.contract.rules import PolicyRule
from workflows.gate.paths import normal_path, rule_arguments
from workflows.gate.policy import evaluate

SECRETS = PolicyRule(
    tool="read_file",
    when={"path": "*.env"},
    decision="deny",
    reason="secrets stay on the worker",
)
ENV_SPELLINGS = [
    ".env",
    ".env/",
    ".env/.",
    "./.env/",
    ".env//",
    "./.env",
    "a/../.env",
    "a/./b/../../.env/",
]


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        (".", "."),
        ("./", "."),
        ("", ""),
        ("  ", "  "),
        ("notes.txt", "notes.txt"),
        ("./notes.txt", "notes.txt"),
        ("logs/", "logs"),
        ("logs//a.log", "logs/a.log"),
        ("logs/./a.log/.", "logs/a.log"),
        ("logs/../notes.txt", "notes.txt"),
        ("logs/..", "."),
        ("a/b/../../c", "c"),
        # leaves the workspace: as given (the tool refuses it; a deny on it still matches)
        ("..", ".."),
        ("../x", "../x"),
        ("a/../../x/", "a/../../x/"),
        # absolute: stays absolute, its segments normalised
        ("/", "/"),
        ("/srv/ws/.env/", "/srv/ws/.env"),
        ("//srv/./ws//x/../.env", "/srv/ws/.env"),
        ("/../etc/passwd", "/etc/passwd"),
        ("a\x00/", "a\x00/"),
        ("~/x/", "~/x"),
        ("a\\b/", "a\\b"),
    ],
)
def test_normal_path(raw: str, normal: str) -> None:
    assert normal_path(raw) == normal


segment = st.sampled_from(["", ".", "..", "a", "b", ".env", "x y", "é"])


@given(st.lists(segment, max_size=8), st.booleans())
def test_normal_path_is_one_spelling(segments: list[str], absolute: bool) -> None:
    raw = ("/" if absolute else "") + "/".join(segments)
    absolute = raw.startswith("/")
    normal = normal_path(raw)
    assert normal_path(normal) == normal  # a normal path is its own spelling
    if normal == raw and not absolute:
        return  # empty, or leaves the workspace: kept as given
    parts = normal.split("/")[1:] if absolute else normal.split("/")
    assert normal in (".", "/") or all(p not in ("", ".", "..") for p in parts)
    assert normal == "/" or not normal.endswith("/")


def test_rule_arguments_normalise_only_path_parameters() -> None:
    given_args: dict[str, Any] = {"path": "./.env/", "command": "cat ./.env/", "n": 1}
    assert rule_arguments(given_args, ("path",)) == {
        "path": ".env",
        "command": "cat ./.env/",
        "n": 1,
    }
    assert rule_arguments(json.dumps(given_args), ("path",))["path"] == ".env"
    assert rule_arguments(given_args, ()) == given_args
    assert rule_arguments({"path": 5}, ("path",)) == {"path": 5}
    assert rule_arguments("[1]", ("path",)) == [1]
    assert rule_arguments("not json", ("path",)) == "not json"


@pytest.mark.parametrize("spelling", ENV_SPELLINGS)
def test_a_deny_path_glob_sees_every_spelling_of_the_file(spelling: str) -> None:
    for arguments in ({"path": spelling}, json.dumps({"path": spelling})):
        verdict = evaluate(
            [SECRETS], "read_file", arguments, requires_approval=False, path_parameters=("path",)
        )
        assert (verdict.decision, verdict.rule) == ("deny", 0)
        # the same, through the function the workflow calls first
        seen = rule_arguments(arguments, ("path",))
        assert evaluate([SECRETS], "read_file", seen, requires_approval=False).rule == 0


@pytest.mark.parametrize("spelling", [".env/", ".env/.", "./.env/", ".env//"])
def test_runs_recorded_before_see_the_path_as_written(spelling: str) -> None:
    verdict = evaluate([SECRETS], "read_file", {"path": spelling}, requires_approval=False)
    assert verdict.rule is None and verdict.decision == "allow"


def test_an_allow_on_a_folder_does_not_reach_out_of_it_by_dot_dot() -> None:
    logs = PolicyRule(tool="delete_path", when={"path": "logs/*"}, decision="allow")

    def decide(path: str) -> str:
        return evaluate(
            [logs], "delete_path", {"path": path}, requires_approval=True, path_parameters=("path",)
        ).decision

    assert decide("logs/old") == "allow"
    assert decide("./logs//old/") == "allow"
    assert decide("logs/../notes.txt") == "ask"
    assert decide("logs/a/../../notes.txt") == "ask"


@pytest.mark.parametrize(
    ("raw", "seen"),
    [
        ("/srv/ws/secrets/a", "secrets/a"),
        ("/srv/ws//secrets/./a/", "secrets/a"),
        ("/srv/ws/logs/../secrets/a", "secrets/a"),
        ("/srv/ws", "."),
        ("/srv/ws/", "."),
        ("/srv/wsx/secrets/a", "/srv/wsx/secrets/a"),  # another folder: stays absolute
        ("/etc/passwd", "/etc/passwd"),
        ("secrets/a", "secrets/a"),
    ],
)
def test_an_absolute_path_inside_the_workspace_is_seen_workspace_relative(
    raw: str, seen: str
) -> None:
    assert normal_path(raw, "/srv/ws") == seen
    assert rule_arguments({"path": raw}, ("path",), "/srv/ws") == {"path": seen}


def test_an_ask_on_a_folder_sees_the_absolute_spelling_of_its_files() -> None:
    secrets = PolicyRule(tool="read_file", when={"path": "secrets/*"}, decision="ask")
    allow = PolicyRule(tool="read_file", decision="allow")

    def decide(path: str, root: str | None) -> str:
        return evaluate(
            [secrets, allow],
            "read_file",
            {"path": path},
            requires_approval=False,
            path_parameters=("path",),
            path_root=root,
        ).decision

    assert decide("secrets/a", "/srv/ws") == "ask"
    assert decide("/srv/ws/secrets/a", "/srv/ws") == "ask"
    assert decide("/srv/ws/./logs/../secrets/a", "/srv/ws") == "ask"
    assert decide("/srv/ws/notes.txt", "/srv/ws") == "allow"
    assert decide("/srv/ws/secrets/a", None) == "allow"  # runs recorded before: as written
