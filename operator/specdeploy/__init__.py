"""specdeploy: a Kubernetes operator for EAGLE-3 verifier/speculator pairs."""

__version__ = "0.1.0"
