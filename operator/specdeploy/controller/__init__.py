"""The operator process: kopf handlers feeding a tested controller core, status, diffing, admission.

workqueue (queue, retries, write dedup; no kopf) <- reconcile (one pass; no kopf) <- handlers (kopf
registration) <- main (the process entry of ``specdeploy run``, which starts kopf).
"""
