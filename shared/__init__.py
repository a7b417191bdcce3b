"""Code every Cairn service shares: models, the pure decision core, ports, adapters, telemetry, config."""
