"""Real systemd test hosts (systemd-nspawn containers in network namespaces) for tests and CI."""
