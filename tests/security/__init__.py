"""Regressions of attacks on the appliance: each test tries one and asserts it is refused."""
