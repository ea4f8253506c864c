"""`imagenot` subcommands of the acquire stage."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands (none yet)."""
