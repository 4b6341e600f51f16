"""`python -m trainer`: the same command as `trainer`."""

from trainer.config.cli import main

raise SystemExit(main())
