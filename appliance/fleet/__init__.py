"""The browser fleet: worker connections, the WebSocket protocol, heartbeats, signaling, probes."""
