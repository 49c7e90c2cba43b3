"""The bodies of the sweep's jobs, one module per stage; each rule's job is declared in spica_lib/host/registry.py."""
