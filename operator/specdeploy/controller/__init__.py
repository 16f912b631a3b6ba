"""The operator process: kopf handlers feeding a tested controller core, status, diffing, admission.

runtime (queue, retries, write dedup; no kopf) <- reconcile (one pass; no kopf) <- handlers (the
only kopf module) <- main (the process entry of ``specdeploy run``).
"""
