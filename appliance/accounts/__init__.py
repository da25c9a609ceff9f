"""Accounts: users and roles, password hashing, sessions, API tokens, enrolment links."""
