"""The end of the worker's ready line, `switched_on`: what is on, in `key=value` fields after
the ones the line always had, with nothing secret in them (the notification URL's path, user info
and query stay out)."""

from __future__ import annotations

from pathlib import Path

from runtime.settings import Settings
from worker import switched_on

NOTHING = (
    "policy=none encryption=off notifications=off escalation=off budget_groups=any approvers=none"
    " sub_agents=off"
)


def settings(**values: object) -> Settings:
    return Settings.read({}).model_copy(update=values)


def test_a_worker_with_nothing_on():
    assert switched_on(settings(), 0) == NOTHING


def test_the_policy_file_and_its_rules_are_counted(tmp_path: Path):
    shown = switched_on(settings(policy_file=tmp_path / "p.json"), 1)
    assert shown.startswith(f"policy={tmp_path / 'p.json'}(1 rule) "), shown
    assert "(3 rules) encryption=" in switched_on(settings(policy_file=tmp_path / "p"), 3)
    assert "(0 rules) encryption=" in switched_on(settings(policy_file=tmp_path / "p"), 0)


def test_notifications_say_where_without_the_secret_parts():
    url = "https://user:pw-SECRET@hooks.example:8443/services/T0/SECRET?token=SECRET#SECRET"
    shown = switched_on(settings(notify_url=url), 0)
    assert " notifications=on(https://hooks.example:8443) " in shown
    assert "SECRET" not in shown and "user" not in shown


def test_escalation_and_budget_groups():
    both = settings(escalate_after_seconds=90.0, escalate_to=("ops", "leads"))
    assert " escalation=after 90s to ops,leads " in switched_on(both, 0)
    half = settings(escalate_after_seconds=1.5)
    assert " escalation=after 1.5s to (run's) " in switched_on(half, 0)
    other_half = settings(escalate_to=("ops",))
    assert " escalation=after (run's) to ops " in switched_on(other_half, 0)
    groups = settings(budget_groups=("finance", "ops"))
    assert " budget_groups=finance,ops approvers=none " in switched_on(groups, 0)


def test_the_approvers_file_and_its_people_are_counted(tmp_path: Path):
    with_file = settings(approvers_file=tmp_path / "approvers")
    shown = switched_on(with_file, 0, 3)
    assert f" approvers={tmp_path / 'approvers'}(3 people) " in shown, shown
    assert "(1 person) " in switched_on(with_file, 0, 1)


def test_sub_agents_and_their_depth():
    assert switched_on(settings(sub_agents=True), 0).endswith(" sub_agents=on(depth 2)")
    deeper = settings(sub_agents=True, max_depth=3)
    assert switched_on(deeper, 0).endswith(" sub_agents=on(depth 3)")


def test_encryption_is_on_with_a_key_or_keys():
    assert " encryption=on " in switched_on(settings(encryption_key="k"), 0)
    assert " encryption=on " in switched_on(settings(encryption_keys="a:k"), 0)
