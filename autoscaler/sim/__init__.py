"""Discrete-event simulator of a Volcano GPU cluster that replays job traces under several
scaling policies, one of them the real planner (`autoscaler.plan.planner.plan`).

Floors: `workload` (job specs, speedup curves) < `profiles`, `traces` (readers) <
`engine` (cluster + Volcano-like scheduler) < `policies` (controllers, incl. the planner) <
`metrics` < `report` (table, JSON, plots) < `cli`. Nothing here touches the network.
See docs/simulator.md.
"""
