"""`peermr backup` and `peermr restore`: the data directory copied while the appliance runs."""
