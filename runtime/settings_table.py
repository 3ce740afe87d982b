"""The tables of settings of the README and docs/worker.md, made from the settings' own docs
(`runtime.settings`), so each setting is written once.

    python -m runtime.settings_table            # the full table (docs/worker.md)
    python -m runtime.settings_table --readme   # the README's short one
    python -m runtime.settings_table --write    # put both in place, between their markers

A test checks that both files hold exactly what this prints.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from runtime.settings import variables

ROOT = Path(__file__).resolve().parent.parent
BEGIN = "<!-- settings table: made by `python -m runtime.settings_table --write` from"
BEGIN_LINE = BEGIN + " runtime/settings.py; edit the settings there -->"
END = "<!-- end of the settings table -->"
HEAD = "| variable | used by | default | meaning |\n|---|---|---|---|"


@dataclass(frozen=True)
class Row:
    variable: str
    used_by: str
    shown: str
    meaning: str
    readme: bool = False

    def line(self, link_prefix: str) -> str:
        meaning = self.meaning.replace("](docs/", f"]({link_prefix}")
        return f"| {self.variable} | {self.used_by} | {self.shown} | {meaning} |"


LIBRARY_ROWS = (
    Row(
        "`OTEL_EXPORTER_OTLP_ENDPOINT`",
        "all",
        "*(none: no traces)*",
        "an OTLP/HTTP endpoint's base URL, e.g. `http://collector:4318`: every program exports"
        " traces (one per run); `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (a full URL) wins",
    ),
    Row(
        "`OTEL_EXPORTER_OTLP_HEADERS`, `…_TIMEOUT`, `…_COMPRESSION`, `…_CERTIFICATE`, `OTEL_BSP_*`,"
        " `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`",
        "all",
        "the OpenTelemetry SDK's",
        "the exporter, its batches and the service (default `durable-agent-worker` /"
        " `durable-agent-client`)",
    ),
    Row(
        "`OTEL_EXPORTER_OTLP_PROTOCOL`",
        "all",
        "`http/protobuf`",
        "only `http/protobuf` is spoken: anything else stops the worker",
    ),
    Row(
        "`OTEL_SDK_DISABLED`, `OTEL_TRACES_EXPORTER`",
        "all",
        "`false`, `otlp`",
        "`true`, or `none`: no traces",
    ),
    Row("`TEMPORAL_ADDRESS`", "all", "`localhost:7233`", "the Temporal frontend", readme=True),
    Row("`TEMPORAL_NAMESPACE`", "all", "`default`", "namespace", readme=True),
    Row("`TEMPORAL_API_KEY`", "all", "*(none)*", "API key (Temporal Cloud)"),
    Row(
        "`TEMPORAL_TLS`, `TEMPORAL_TLS_CLIENT_CERT_PATH`, `TEMPORAL_TLS_CLIENT_KEY_PATH`,"
        " `TEMPORAL_TLS_SERVER_CA_CERT_PATH`, `TEMPORAL_TLS_SERVER_NAME`, …",
        "all",
        "off",
        "TLS / mTLS",
    ),
    Row(
        "`TEMPORAL_PROFILE`, `TEMPORAL_CONFIG_FILE`",
        "all",
        "`default` profile of `temporal.toml`",
        "profiles",
    ),
)
"""Settings the libraries read themselves (OpenTelemetry's SDK, Temporal's `envconfig`)."""


def rows() -> list[Row]:
    """The project's settings in the order of their fields, then the libraries' own."""
    own = []
    for name, field in variables().items():
        extra = field.json_schema_extra
        assert isinstance(extra, dict) and field.description, f"{name} has no documentation"
        own.append(
            Row(
                f"`{name}`",
                str(extra["used_by"]),
                str(extra["shown"]),
                field.description,
                readme=bool(extra["readme"]),
            )
        )
    return [*own, *LIBRARY_ROWS]


def table(*, readme: bool) -> str:
    """The README's table (`readme`: the settings marked for it, links from the top folder) or
    docs/worker.md's (every setting, links from docs/)."""
    chosen = [r for r in rows() if r.readme or not readme]
    prefix = "docs/" if readme else ""
    return "\n".join([HEAD, *(r.line(prefix) for r in chosen)])


PLACES = {"README.md": True, "docs/worker.md": False}
"""Where the tables are, and whether each is the README's."""


def between_markers(text: str) -> str | None:
    """The table a page holds between its markers, or None when it has none."""
    found = re.search(re.escape(BEGIN) + r"[^\n]*\n(.*?)\n" + re.escape(END), text, re.S)
    return found.group(1) if found else None


def written(text: str, made: str) -> str:
    """`text` with its table replaced by `made`."""
    start = text.index(BEGIN)
    end = text.index(END, start)
    return f"{text[:start]}{BEGIN_LINE}\n{made}\n{text[end:]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runtime.settings_table")
    parser.add_argument("--readme", action="store_true", help="the README's short table")
    parser.add_argument("--write", action="store_true", help="put both tables in place")
    args = parser.parse_args(argv)
    if not args.write:
        print(table(readme=args.readme))
        return 0
    for name, is_readme in PLACES.items():
        path = ROOT / name
        path.write_text(written(path.read_text(), table(readme=is_readme)))
        print(f"wrote the table of {name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
