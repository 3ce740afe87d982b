"""AGENT_APPROVERS_FILE (`runtime.approvers`) and the keys that sign (`runtime.signing_key`), with
keys made by `ssh-keygen -t ed25519`: the file's forms, every line it refuses (one line naming
it), the worker's check of a signature (groups from the file, a service only for whom the file
lets), and the terminal's key lookup."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest

from runtime.approvers import (
    DOES_NOT_VERIFY,
    NO_FILE,
    AnswerVerifier,
    ApproversFileError,
    load_approvers,
)
from runtime.settings import Settings
from runtime.signing_key import SigningKey, SigningKeyError, find_signing_key, read_private_key
from tests.people import make_people, public_line, ssh_keygen
from workflows.people.signatures import SignedFields, VerifyRequest

FIELDS = SignedFields(
    approver="alice",
    workflow_id="agent-1",
    run_id="run-1",
    call_id="c1",
    arguments_sha256="a" * 64,
    decision="approve",
    signed_at="2026-12-02T14:00:00.000000Z",
)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("keys")
    return {name: ssh_keygen(folder / name, name) for name in ("a1", "a2", "ben", "web", "x")}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "approvers"
    path.write_text(text)
    return path


def request(key: SigningKey, fields: SignedFields = FIELDS, **changed: str) -> VerifyRequest:
    signature = key.sign(fields)
    given = {**fields.__dict__, "signature": signature, **changed}
    return VerifyRequest.model_validate(given)


def test_a_file_with_people_services_comments_and_several_keys(tmp_path, keys):
    path = write(
        tmp_path,
        "# the people who approve\n"
        f"alice ops,oncall {public_line(keys['a1'])}\n"
        "\n"
        f"  alice oncall,ops {public_line(keys['a2'])}\n"
        f"ben ops {public_line(keys['ben'])}\n"
        "carol - via:web\n"
        "ben ops via:web\n"
        f"web @service {public_line(keys['web'])}\n",
    )
    approvers = load_approvers(path)
    assert [p.name for p in approvers.people()] == ["alice", "ben", "carol"]
    assert approvers.groups_of("alice") == ("oncall", "ops") and approvers.groups_of("carol") == ()
    assert len(approvers.person("alice").keys) == 2  # type: ignore[union-attr]
    assert approvers.group_sizes() == {"oncall": 1, "ops": 2}
    assert approvers.signs_through("web") == ["ben", "carol"]
    assert approvers.may_sign_through("carol", "web") and not approvers.may_sign_through(
        "alice", "web"
    )
    second = SigningKey.load(keys["a2"], approvers)
    assert (second.person, second.service) == ("alice", None)
    service = SigningKey.load(keys["web"], approvers)
    assert (service.person, service.service) == (None, "web")
    printed = subprocess.run(
        ["ssh-keygen", "-l", "-f", f"{keys['a1']}.pub"], capture_output=True, text=True, check=True
    ).stdout.split()[1]
    assert approvers.person("alice").keys[0].fingerprint == printed  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("lines", "problem"),
    [
        (["alice ops"], "line 1: expected NAME GROUPS KEY"),
        (["alice ops ssh-rsa AAAAB3NzaC1yc2E"], "line 1: only ssh-ed25519 keys are taken, not 'ssh-rsa'"),
        (["alice o/ps {a1}"], "line 1: group 'o/ps' is not a name"),
        (["al!ce ops {a1}"], "line 1: name 'al!ce' is not a name"),
        (["alice ops ssh-ed25519 AAAA!!"], "line 1: the ssh-ed25519 key does not load"),
        (["# hi", "alice ops {ec}"], "line 2: only ssh-ed25519 keys are taken, not 'ecdsa-sha2-nistp256'"),
        (["alice ops {a1}", "alice dev {a2}"], "line 2: alice's groups (dev) differ from line 1's (ops)"),
        (["alice ops {a1}", "ben ops {a1}"], "line 2: this key is alice's already (line 1)"),
        (["web @service {a1}", "web ops {a2}"], "line 2: web is a signing service (line 1), not a person"),
        (["web ops {a1}", "web @service {a2}"], "line 2: web is a person (line 1), not a service"),
        (["alice ops via:web"], "line 1: via:web names no signing service"),
        (["alice ops via:web extra"], "line 1: a via:SERVICE line ends after the service's name"),
    ],
)  # fmt: skip
def test_a_bad_line_is_refused_naming_it(tmp_path, keys, lines, problem):
    ec = tmp_path / "ec"
    if any("{ec}" in line for line in lines):
        subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-f", str(ec)], check=True)
    text = "\n".join(lines).format(
        a1=public_line(keys["a1"]), a2=public_line(keys["a2"]),
        ec=public_line(ec) if ec.exists() else "",
    )  # fmt: skip
    with pytest.raises(ApproversFileError) as caught:
        load_approvers(write(tmp_path, text + "\n"))
    message = str(caught.value)
    assert message.startswith(f"AGENT_APPROVERS_FILE {problem}"), message
    assert "\n" not in message


def test_a_file_that_cannot_be_read_is_one_line(tmp_path):
    with pytest.raises(ApproversFileError, match=r"^AGENT_APPROVERS_FILE .*missing cannot be read"):
        load_approvers(tmp_path / "missing")


def test_the_worker_checks_the_signer_and_takes_the_groups_from_the_file(tmp_path, keys):
    people = make_people(tmp_path, {"alice": ["ops"], "ben": []}, via={"web": ["ben"]})
    approvers = people.approvers
    alice = people.key("alice")
    taken = approvers.verify(request(alice))
    assert taken.valid and taken.groups == ["ops"] and taken.signed_by is None
    # Ben signs with his own key as alice: does not verify.
    as_alice = approvers.verify(request(people.key("ben")))
    assert not as_alice.valid and as_alice.problem == DOES_NOT_VERIFY
    # A signature moved to another call does not verify.
    moved = approvers.verify(request(alice, call_id="c2"))
    assert not moved.valid and moved.problem == DOES_NOT_VERIFY
    # The web app signs for ben, whom the file lets, and says so.
    for_ben = SignedFields(**{**FIELDS.__dict__, "approver": "ben", "signed_by": "web"})
    through = approvers.verify(request(people.key("web"), for_ben))
    assert through.valid and through.groups == [] and through.signed_by == "web"
    # ... never for alice, whom it does not.
    for_alice = SignedFields(**{**FIELDS.__dict__, "signed_by": "web"})
    refused = approvers.verify(request(people.key("web"), for_alice))
    assert not refused.valid
    assert refused.problem == (
        "alice may not sign through 'web' (the worker's approvers file has no `alice … via:web`"
        " line)"
    )
    # A service's signature passed off as ben's own does not verify.
    unnamed = approvers.verify(request(people.key("web"), for_ben, signed_by=""))
    assert not unnamed.valid
    stranger = approvers.verify(request(alice, approver="mallory"))
    assert stranger.problem == "'mallory' is not in the worker's approvers file"
    hmac_sized = request(alice, signature=base64.b64encode(b"k" * 32).decode())
    assert "not an Ed25519 signature" in str(approvers.verify(hmac_sized).problem)


async def test_a_worker_without_the_file_refuses_every_signed_decision(tmp_path):
    people = make_people(tmp_path, {"alice": ["ops"]})
    verdict = await AnswerVerifier(None).verify_answer(request(people.key("alice")))
    assert not verdict.valid and verdict.problem == NO_FILE


def test_a_passphrase_is_asked_at_a_terminal_and_else_refused_in_one_line(tmp_path, keys):
    path = tmp_path / "locked"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "secret", "-f", str(path)], check=True
    )
    assert read_private_key(path, "--key", ask=lambda _p: b"secret") is not None
    with pytest.raises(SigningKeyError, match="the passphrase does not open it"):
        read_private_key(path, "--key", ask=lambda _p: b"wrong")
    with pytest.raises(SigningKeyError) as caught:
        read_private_key(path, "--key", ask=lambda _p: None)
    assert str(caught.value) == (
        f"--key {path} is protected by a passphrase and there is no terminal to ask it at"
    )
    rsa = tmp_path / "rsa"
    subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-N", "", "-f", str(rsa)],
                   check=True)  # fmt: skip
    with pytest.raises(SigningKeyError, match="is a RSA key: only Ed25519 keys sign"):
        read_private_key(rsa, "--key")


def test_the_terminal_finds_its_key_flag_then_setting_then_the_home_key(tmp_path):
    people = make_people(tmp_path, {"alice": ["ops"], "ben": ["ops"]}, via={"web": ["ben"]})
    settings = Settings.read({"AGENT_APPROVERS_FILE": str(people.path)})
    home = tmp_path / "home_id_ed25519"
    nobody = tmp_path / "nothing"
    assert find_signing_key(None, settings, home_key=nobody).key is None
    ssh_keygen(home)  # not in the file: not used
    unlisted = find_signing_key(None, settings, home_key=home)
    assert unlisted.key is None and "public key is not in AGENT_APPROVERS_FILE" in str(
        unlisted.unsigned
    )
    home.unlink()
    Path(f"{home}.pub").unlink()
    home.write_bytes(people.key_files["alice"].read_bytes())
    Path(f"{home}.pub").write_text(public_line(people.key_files["alice"]))
    found = find_signing_key(None, settings, home_key=home).key
    assert found is not None and found.person == "alice"
    with_setting = settings.model_copy(update={"signing_key": people.key_files["ben"]})
    assert find_signing_key(None, with_setting, home_key=home).key.person == "ben"  # type: ignore[union-attr]
    flag = find_signing_key(people.key_files["alice"], with_setting, home_key=home).key
    assert flag is not None and flag.person == "alice"
    with pytest.raises(SigningKeyError, match="is the signing service web's key"):
        find_signing_key(people.key_files["web"], settings, home_key=nobody)
    no_file = Settings.read({})
    with pytest.raises(SigningKeyError, match="AGENT_APPROVERS_FILE is not set"):
        find_signing_key(people.key_files["alice"], no_file, home_key=nobody)
    stranger = ssh_keygen(tmp_path / "stranger")
    with pytest.raises(SigningKeyError, match=r"is not in AGENT_APPROVERS_FILE .*: add its public"):
        find_signing_key(stranger, settings, home_key=nobody)
