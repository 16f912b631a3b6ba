"""The local sandbox specdeploy is developed, demonstrated and tested on (docs/sandbox.md)."""
