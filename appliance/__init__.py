"""PeerMR Appliance: coordinator, signaling, TURN, PMRFS namenode, billing and dashboard in one process."""

__version__ = "0.1.0"
