"""create_tenant, create_api_key and revoke_api_key: a key works until it is revoked."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

pytestmark = pytest.mark.django_db


def test_key_from_command_authenticates_until_revoked(redis_client: object) -> None:
    call_command("create_tenant", "payments", stdout=StringIO())
    out = StringIO()
    call_command("create_api_key", "payments", "--name", "ci", stdout=out, stderr=StringIO())
    key = out.getvalue().strip()
    headers = {"Authorization": f"Bearer {key}"}

    assert Client().get("/v1/jobs", headers=headers).status_code == 200
    call_command("revoke_api_key", key, stdout=StringIO())
    assert Client().get("/v1/jobs", headers=headers).status_code == 401


def test_commands_refuse_bad_input() -> None:
    with pytest.raises(CommandError):
        call_command("create_api_key", "nobody", stdout=StringIO())
    with pytest.raises(CommandError):
        call_command("revoke_api_key", "sk_unknown_x", stdout=StringIO())
    call_command("create_tenant", "dup", stdout=StringIO())
    with pytest.raises(CommandError):
        call_command("create_tenant", "dup", stdout=StringIO())
