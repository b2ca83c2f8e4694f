"""gpusim: a simulated GPU node serving SGLang, for the hicache walkthrough and the tests (standard library only).

Programs that behave, on their command lines and in their output, like the real ones on a GPU box with 8 H100s
and 2 TiB of host RAM, so an agent can be shown (and tests can check) memory analysis, a unit edit, a restart that
takes minutes and the server's answers without a GPU:

* ``sglang_server.py``: the SGLang HTTP server (``/health``, ``/get_server_info``, ...), its start-up log, its
  memory plan and its refusal when the hierarchical cache does not fit in host RAM; ``sd_notify`` READY=1.
* ``nvidia_smi.py``, ``free.py``: ``nvidia-smi`` and ``free`` as the simulated server's memory makes them.
* ``systemctl.py``, ``journalctl.py``: shims of systemd's for hosts without systemd (the embedded node).
* ``install.py``: puts the programs, a profile (``profile_default.json``, ``profile_small_ram.json``) and the
  unit (``sglang.service.in``) into a root directory (``/`` on a real systemd host).

Each program runs as a process of its own, copied onto the host by ``install.py``; none imports anything but the
standard library, and nothing here imports ``agent_tools`` (the tests check both). agent_tools wires it to an
embedded SSH host in :mod:`agent_tools.demo`.
"""
