"""`python -m trainer`: the same command as `trainer`."""

from trainer.cli import main

raise SystemExit(main())
