"""Pydantic models of fabricsched's public formats: the CRDs and the extender wire types.

Rule: data only. No I/O, no Kubernetes client; every other layer may import this one.
"""
