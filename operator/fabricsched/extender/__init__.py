"""The kube-scheduler extender webhook (filter, prioritize), health and metrics endpoints.

Rule: adapter over the controller's state and the placement engine.
"""
