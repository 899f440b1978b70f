"""The discovery service: a stateless fan-out tier between the revision stream's Services and
EndpointSlices and the node proxies and edge load balancers that subscribe to them (ADR 0038).
``python -m app.discovery`` runs one replica; any number may run side by side."""
