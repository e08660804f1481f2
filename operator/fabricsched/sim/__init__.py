"""The event-driven simulator and its baseline policies.

Rule: adapter. Reads files, drives the placement engine, writes results.
"""
