"""``python -m imagenot``: the command every workflow job runs (rules/common.smk), after making
sure it runs the checkout's package (:mod:`imagenot.core.checkout`)."""

from imagenot.core import checkout

checkout.check()

from imagenot.cli import main  # noqa: E402  (after the check: nothing else of another copy runs)

raise SystemExit(main())
