"""Engine nodes: sandbox nodes whose pods run as real local processes (see ``agent``).

Run one per node with ``python -m specdeploy_sandbox.enginenode``; ``sandbox up`` does.
"""
