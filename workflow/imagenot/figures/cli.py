"""`imagenot` subcommands of the figures stage."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands (none yet)."""
