"""censusdp's release pipeline: configuration, privacy mechanisms, ledger, release stages and the command line."""
