"""`starter approvers`: the people of AGENT_APPROVERS_FILE, their groups and how each signs (their
own keys, by fingerprint, and the signing services that may sign for them), then the services.
Reading the file checks every line and every key: a line that does not load is named, and the
command exits 2 (as the worker and the web app would not start with it)."""

from __future__ import annotations

from runtime.approvers import ApproversFile, load_approvers
from runtime.setting_error import SettingError
from runtime.settings import Settings
from runtime.signing_key import find_signing_key
from starter.errors import EXIT_OK, EXIT_USAGE
from starter.output import Output
from starter.render import visible


def how_signs(approvers: ApproversFile, name: str) -> list[str]:
    """How one person signs: `own key SHA256:…` per key, `via SERVICE` per service."""
    person = approvers.person(name)
    if person is None:
        return []
    ways = [f"own key {key.fingerprint}" for key in person.keys]
    return ways + [f"via {service}" for service in person.via]


def approvers_lines(approvers: ApproversFile) -> list[str]:
    """The table people read: one line per person, then one per signing service."""
    people = approvers.people()
    width = max([len("NAME"), *(len(p.name) for p in people)])
    groups_width = max([len("GROUPS"), *(len(",".join(p.groups) or "-") for p in people)])
    lines = [f"{'NAME':<{width}}  {'GROUPS':<{groups_width}}  SIGNS WITH"]
    for person in people:
        groups = ",".join(person.groups) or "-"
        ways = ", ".join(how_signs(approvers, person.name))
        lines.append(f"{person.name:<{width}}  {groups:<{groups_width}}  {ways}")
    for service in approvers.services():
        keys = ", ".join(key.fingerprint for key in service.keys)
        signs_for = ", ".join(approvers.signs_through(service.name)) or "no one"
        lines.append(f"service {service.name}: key {keys}; signs for {signs_for}")
    return lines


def cmd_approvers(out: Output) -> int:
    settings = Settings.read()
    if settings.approvers_file is None:
        out.error("AGENT_APPROVERS_FILE is not set: no one's key is known (docs/approvers.md)")
        return EXIT_USAGE
    try:
        approvers = load_approvers(settings.approvers_file)
    except SettingError as err:
        out.error(str(err))
        return EXIT_USAGE
    count = len(approvers)
    out.line(
        f"{approvers.path}: {count} {'person' if count == 1 else 'people'},"
        f" {len(approvers.services())} signing service(s); every key loads"
    )
    for line in approvers_lines(approvers):
        out.line(visible(line))
    for person in approvers.people():
        out.data(
            {
                "name": person.name,
                "groups": list(person.groups),
                "keys": [key.fingerprint for key in person.keys],
                "via": list(person.via),
            }
        )
    for service in approvers.services():
        out.data(
            {
                "service": service.name,
                "keys": [key.fingerprint for key in service.keys],
                "signs_for": approvers.signs_through(service.name),
            }
        )
    try:
        found = find_signing_key(None, settings)
    except SettingError as err:
        out.info(f"this terminal's key: {err}")
        return EXIT_OK
    if found.key is not None:
        out.info(f"this terminal signs as {found.key.person} ({found.key.path})")
    else:
        out.info(f"this terminal signs nothing: {found.unsigned}")
    return EXIT_OK
