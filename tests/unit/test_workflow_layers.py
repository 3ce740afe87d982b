"""The layering inside `workflows/`, read from the code's own imports: each concept may import
only the layers below it, so the gate never reaches up into the run, nor the conversation into
the people. A new import that runs back up fails here, naming the file and the line.

    contract/        the wire types and the pure rules of the contract
    (the top)        shared modules: names, model, context, shown, bounds, intake, ...
    conversation/    the record, what a request carries, the window
    gate/            what decides a call
    people/          waiting for people, telling them, their signatures
    run/             AgentWorkflow and its seams
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"
LAYERS = ["contract", "", "conversation", "gate", "people", "run"]
"""Bottom to top; "" is the modules directly in `workflows/`."""
SHARED_ORDER = [
    "names",
    "versions",
    "waiting_runs",
    "model",
    "context",
    "shown",
    "bounds",
    "intake",
    "converter",
    "metrics",
    "activity_calls",
]
"""The shared modules, bottom to top: each may import only those before it (and `contract/`)."""


def layer_of(module: str) -> int:
    """`workflows.gate.policy` -> the index of `gate` in LAYERS."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    return LAYERS.index("")


def imports(path: Path) -> list[tuple[int, str]]:
    """Every `workflows.*` module this file imports (at any depth), with its line."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "workflows":
                found += [(node.lineno, f"workflows.{alias.name}") for alias in node.names]
            elif node.module.startswith("workflows."):
                package = node.module
                for alias in node.names:  # `from workflows.gate import policy` names a module
                    child = WORKFLOWS.joinpath(*package.split(".")[1:], f"{alias.name}.py")
                    found.append(
                        (node.lineno, f"{package}.{alias.name}" if child.exists() else package)
                    )
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("workflows.")]
    return found


def module_of(path: Path) -> str:
    relative = path.relative_to(WORKFLOWS.parent).with_suffix("")
    parts = [p for p in relative.parts if p != "__init__"]
    return ".".join(parts)


MODULES = sorted(WORKFLOWS.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(WORKFLOWS)))
def test_no_import_runs_up_a_layer(path: Path) -> None:
    here = module_of(path)
    mine = layer_of(here)
    wrong = []
    for line, target in imports(path):
        theirs = layer_of(target)
        if theirs > mine:
            wrong.append(f"{path.relative_to(WORKFLOWS.parent)}:{line} imports {target}")
        elif theirs == mine == LAYERS.index("") and here != "workflows":
            name, other = here.split(".")[-1], target.split(".")[1]
            if name in SHARED_ORDER and other in SHARED_ORDER:
                if SHARED_ORDER.index(other) >= SHARED_ORDER.index(name):
                    wrong.append(f"{path.relative_to(WORKFLOWS.parent)}:{line} imports {target}")
    assert wrong == []


def test_every_shared_module_is_placed() -> None:
    top = {p.stem for p in WORKFLOWS.glob("*.py")} - {"__init__"}
    assert top == set(SHARED_ORDER)
    assert len(top) <= 12


def test_the_layers_are_the_folders() -> None:
    folders = {p.name for p in WORKFLOWS.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == {layer for layer in LAYERS if layer}


def test_the_check_catches_an_upward_import(tmp_path: Path) -> None:
    sample = tmp_path / "probe.py"
    sample.write_text(
        "from workflows.run.agent import AgentWorkflow\nfrom workflows import names\n"
    )
    assert [target for _, target in imports(sample)] == ["workflows.run.agent", "workflows.names"]
    assert layer_of("workflows.run.agent") > layer_of("workflows.gate.policy")
