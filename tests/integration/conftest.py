"""Fixtures the integration modules that run jobs as one coordinator share (each module's own
`appliance` fixture, or the root one, is the appliance they sign up on)."""

from __future__ import annotations

import pytest

from tests.integration.test_job_scheduling import Api, token_for


@pytest.fixture(scope="module")
def carol_client(appliance):
    """A signed-in dashboard client of carol@example.com, a coordinator."""
    appliance.add_user("carol@example.com", "coordinator", "carol-password-1")
    client = appliance.client()
    client.login("carol@example.com", "carol-password-1")
    return client


@pytest.fixture(scope="module")
def carol_token(appliance, carol_client) -> str:
    return token_for(appliance, "carol@example.com")


@pytest.fixture(scope="module")
def carol(appliance, carol_token):
    """Carol's REST API client."""
    return Api(appliance, carol_token)
