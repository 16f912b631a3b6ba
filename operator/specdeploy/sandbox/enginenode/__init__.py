"""Engine nodes: sandbox nodes whose pods run as real local processes (see ``agent``).

Run one per node with ``python -m specdeploy.sandbox.enginenode``; ``sandbox up`` does.
"""
