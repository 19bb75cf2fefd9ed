"""Shared fixtures. Tests may use seeded randomness: enable it for the whole run."""

import os

os.environ.setdefault("GPFRAME_TESTING", "1")
