"""The placement engine and the capacity model.

Rule: pure. Fabric snapshot + free GPUs + traffic + gang request -> plan or NoFit.
No I/O; the extender, the simulator and the benchmarks all call this one engine.
"""
