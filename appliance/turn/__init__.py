"""The embedded TURN/STUN server (RFC 8656), its credentials and byte metering."""
