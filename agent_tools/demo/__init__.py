"""``agent-tools demo``: the hicache walkthrough and the simulated GPU node it runs on.

* :mod:`agent_tools.demo.hicache`: the walkthrough, an agent-shaped script of tool calls (memory analysis, KV pool
  estimate, unit edit, restart followed to readiness, verification or rollback); any host with the unit will do.
* :mod:`agent_tools.demo.node`: the simulated node (:mod:`gpusim` on an in-process SSH host on loopback).
"""
